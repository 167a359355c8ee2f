// DecideListenerAuth: which TCP listeners are allowed on which address; a
// listener that does not authenticate its clients only by a flag in its own name.
#include "common/listener_policy.h"

#include <gtest/gtest.h>

namespace lossd {
namespace {

ListenAddress Addr(const char* text) {
  auto a = ParseListenAddress(text);
  EXPECT_TRUE(a.ok()) << text;
  return *a;
}

struct Case {
  const char* listen;
  ListenerChoice choice;
  bool ok;
  ListenerAuth auth;     // when ok
  const char* mentions;  // when refused: the flag the message must name
};

ListenerChoice Choice(bool tls, bool ca, bool no_client_auth, bool plain_lo, bool insecure) {
  ListenerChoice c;
  c.tls = tls;
  c.client_ca = ca;
  c.tls_no_client_auth = no_client_auth;
  c.plaintext_loopback = plain_lo;
  c.insecure_tcp = insecure;
  return c;
}

TEST(ListenerPolicy, UnauthenticatedListenersNeedTheirOwnFlag) {
  const Case cases[] = {
      // mutual TLS: anywhere
      {"0.0.0.0:7070", Choice(true, true, false, false, false), true, ListenerAuth::kMutualTls, ""},
      {"127.0.0.1:7070", Choice(true, true, false, false, false), true, ListenerAuth::kMutualTls,
       ""},
      // TLS without client certificates: refused off loopback and on it, unless named
      {"0.0.0.0:7070", Choice(true, false, false, false, false), false, {}, "--tls-client-ca"},
      {"[::]:7070", Choice(true, false, false, false, false), false, {}, "--tls-no-client-auth"},
      {"127.0.0.1:7070",
       Choice(true, false, false, false, false),
       false,
       {},
       "--tls-no-client-auth"},
      {"0.0.0.0:7070", Choice(true, false, true, false, false), true, ListenerAuth::kTls, ""},
      {"[::1]:7070", Choice(true, false, true, false, false), true, ListenerAuth::kTls, ""},
      // plaintext on loopback: only with --plaintext-loopback (not --insecure-tcp)
      {"127.0.0.1:7070",
       Choice(false, false, false, false, false),
       false,
       {},
       "--plaintext-loopback"},
      {"[::1]:7070", Choice(false, false, false, false, false), false, {}, "--plaintext-loopback"},
      {"localhost:7070", Choice(false, false, false, true, false), true, ListenerAuth::kPlaintext,
       ""},
      {"127.0.0.1:7070",
       Choice(false, false, false, false, true),
       false,
       {},
       "--plaintext-loopback"},
      // plaintext off loopback: only with --insecure-tcp
      {"0.0.0.0:7070", Choice(false, false, false, false, false), false, {}, "--insecure-tcp"},
      {"10.1.2.3:7070", Choice(false, false, false, false, true), true, ListenerAuth::kPlaintext,
       ""},
      {"10.1.2.3:7070", Choice(false, false, false, true, false), false, {}, "--insecure-tcp"},
      {"[::ffff:10.0.0.1]:7070", Choice(false, false, false, true, false), false, {}, "not"},
      // contradictions
      {"0.0.0.0:7070", Choice(false, true, false, false, true), false, {}, "--tls-cert"},
      {"0.0.0.0:7070", Choice(false, false, true, false, true), false, {}, "--tls-cert"},
      {"0.0.0.0:7070", Choice(true, true, true, false, false), false, {}, "contradicts"},
      {"0.0.0.0:7070", Choice(true, true, false, false, true), false, {}, "plaintext"},
      {"127.0.0.1:7070", Choice(true, false, true, true, false), false, {}, "plaintext"},
      {"127.0.0.1:7070", Choice(false, false, false, true, true), false, {}, "contradict"},
  };
  for (const Case& c : cases) {
    auto r = DecideListenerAuth(Addr(c.listen), c.choice);
    SCOPED_TRACE(c.listen);
    ASSERT_EQ(r.ok(), c.ok) << (r.ok() ? "accepted" : r.status().message());
    if (c.ok) {
      EXPECT_EQ(*r, c.auth);
    } else {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
      EXPECT_NE(r.status().message().find(c.mentions), std::string::npos) << r.status().message();
    }
  }
}

TEST(ListenerPolicy, MessagesNameTheListenersOwnFlags) {
  ListenerFlagNames http;
  http.what = "HTTP";
  http.listen = "--http";
  http.plaintext_loopback = "--http-plaintext-loopback";
  auto r = DecideListenerAuth(Addr("127.0.0.1:9464"), ListenerChoice{}, http);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("refusing plaintext HTTP on 127.0.0.1:9464"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("--http-plaintext-loopback"), std::string::npos);
}

}  // namespace
}  // namespace lossd
