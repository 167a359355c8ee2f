# lossd: make deps | build | test | run | bench
# Everything needed comes from Debian's packages; `make deps` installs what
# is missing (as root) and is a no-op when all is there.

BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=
RUN_ARGS ?=

DEPS := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config cmake make g++ \
        libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev iproute2 iperf3 ethtool iptables nftables \
        python3 procps protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc \
        python3-grpcio python3-protobuf python3-matplotlib

.PHONY: all deps build test run bench clean

all: build

deps:
	@missing=""; for p in $(DEPS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure $(CTEST_ARGS)

run: build
	$(BUILD)/daemon/lossd $(RUN_ARGS)

bench: build
	bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD)
