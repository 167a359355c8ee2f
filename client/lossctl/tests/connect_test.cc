#include "connect.h"

#include <gtest/gtest.h>

namespace lossctl {
namespace {

TEST(ParseEndpoint, Forms) {
  Endpoint e;
  std::string err;
  ASSERT_TRUE(ParseEndpoint("unix:///run/lossd/lossd.sock", &e, &err));
  EXPECT_TRUE(e.unix_socket);
  EXPECT_EQ(e.socket_path, "/run/lossd/lossd.sock");
  EXPECT_EQ(e.target, "unix:/run/lossd/lossd.sock");
  ASSERT_TRUE(ParseEndpoint("unix:/tmp/x.sock", &e, &err));
  EXPECT_EQ(e.socket_path, "/tmp/x.sock");
  ASSERT_TRUE(ParseEndpoint("/tmp/y.sock", &e, &err));
  EXPECT_EQ(e.target, "unix:/tmp/y.sock");
  ASSERT_TRUE(ParseEndpoint("lossd.example:7443", &e, &err));
  EXPECT_FALSE(e.unix_socket);
  EXPECT_EQ(e.target, "lossd.example:7443");
  ASSERT_TRUE(ParseEndpoint("[::1]:7443", &e, &err));
  ASSERT_TRUE(ParseEndpoint("dns:///lossd:7443", &e, &err));
  EXPECT_FALSE(ParseEndpoint("lossd.example", &e, &err));
  EXPECT_FALSE(ParseEndpoint("::1:7443", &e, &err));
  EXPECT_FALSE(ParseEndpoint("host:http", &e, &err));
  EXPECT_FALSE(ParseEndpoint("unix:", &e, &err));
}

TEST(ExitCodeFor, Contract) {
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::OK), 0);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::UNAVAILABLE), 3);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::NOT_FOUND), 4);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::INVALID_ARGUMENT), 5);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::FAILED_PRECONDITION), 5);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::RESOURCE_EXHAUSTED), 6);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::PERMISSION_DENIED), 7);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::UNAUTHENTICATED), 7);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::INTERNAL), 1);
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::ALREADY_EXISTS), 1);
}

}  // namespace
}  // namespace lossctl
