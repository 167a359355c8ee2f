# lossd: make deps | build | test | run | bench | clients | install | package | wheel
# Everything needed comes from Debian's packages; `make deps` installs what
# is missing (as root) and is a no-op when all is there.

BUILD ?= build
JOBS ?= $(shell nproc)
# Tests run side by side: most e2e tests wait on paced traffic and timers, not
# the CPU (tests/e2e/CMakeLists.txt says which run alone and why).
TEST_JOBS ?= 4
CTEST_ARGS ?=
RUN_ARGS ?=

DEPS := ccache clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config cmake make g++ \
        libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev iproute2 iperf3 ethtool iptables nftables \
        python3 procps protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc \
        python3-grpcio python3-protobuf python3-matplotlib \
        libclang-rt-14-dev systemd openssl util-linux passwd \
        libcpp-httplib-dev libssl-dev prometheus-cpp-dev prometheus prometheus-node-exporter python3-yaml \
        tmux libjs-chart.js chromium chromium-driver python3-selenium nodejs \
        help2man man-db dpkg-dev file lintian python3-pip python3-venv python3-setuptools python3-wheel

# A clients-only build (lossctl, the rule library, the Python client's stubs
# and their unit tests) needs no BPF toolchain: `make clients`.
CLIENT_DEPS := ccache cmake make g++ libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev \
        protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc \
        python3 python3-grpcio python3-protobuf python3-pip python3-venv python3-setuptools python3-wheel
CLIENT_BUILD ?= build-clients
# AddressSanitizer + UBSan build of the unit and bpf tests (make sanitize; not the
# packaging checks, which look at the release tree's generated files).
SAN_BUILD ?= build-asan
SAN_CTEST_ARGS ?=

# make install: PREFIX (default /usr/local) and DESTDIR, as cmake --install takes them.
PREFIX ?= /usr/local
DESTDIR ?=
# make python-client: a virtualenv with the wheel (Debian's grpcio/protobuf visible).
VENV ?= $(HOME)/.local/lib/lossd-venv

.PHONY: all deps client-deps build clients test sanitize sanitize-build run bench format clean \
        install package wheel python-client

all: build

# $(call install_missing,PACKAGES): apt-get install those not installed.
define install_missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

# The independent gRPC clients the e2e tests probe with (health, reflection) come from
# the npm registry (Debian has none): tests/e2e/npm, pinned by its package-lock.json.
# Debian's nodejs has npm in a package of its own; NodeSource's carries it.
NPM_CLIENTS := tests/e2e/npm

deps:
	$(call install_missing,$(DEPS))
	@command -v npm >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; }
	@if [ ! -d $(NPM_CLIENTS)/node_modules ] || [ $(NPM_CLIENTS)/package-lock.json -nt $(NPM_CLIENTS)/node_modules ]; then \
	  echo "installing the npm test clients ($(NPM_CLIENTS))"; \
	  npm ci --prefix $(NPM_CLIENTS) --no-audit --no-fund --ignore-scripts >/dev/null && touch $(NPM_CLIENTS)/node_modules; fi

client-deps:
	$(call install_missing,$(CLIENT_DEPS))

clients: client-deps
	cmake -S . -B $(CLIENT_BUILD) -DLOSSD_CLIENTS_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(CLIENT_BUILD) -j $(JOBS)
	cd $(CLIENT_BUILD) && ctest --output-on-failure -L unit

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Two passes: every test side by side but those labelled serial, then those
# one at a time (run among the others, each would wait for all to drain).
test: build
	cd $(BUILD) && rc=0; \
	  ctest --output-on-failure -j $(TEST_JOBS) -LE serial $(CTEST_ARGS) || rc=1; \
	  if ! ctest -N -L serial $(CTEST_ARGS) | grep -q '^Total Tests: 0$$'; then \
	    ctest --output-on-failure -L serial $(CTEST_ARGS) || rc=1; fi; \
	  exit $$rc

# The unit and bpf tests under ASan + UBSan (-DLOSSD_SANITIZE=ON, Debug: quicker to
# build); not the clients-only tree, the fuzzer (sanitized already) or the Python tests.
sanitize: sanitize-build
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -L 'unit|bpf' -LE 'clients_only|fuzz|package' -E '^python_client' $(SAN_CTEST_ARGS)

# The sanitizer tree alone (.ci/run compiles it, niced, while `make test` runs).
sanitize-build: deps
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DLOSSD_SANITIZE=ON >/dev/null
	cmake --build $(SAN_BUILD) -j $(JOBS) --target sanitize_tests

# lossd (sbin), lossctl, the unit, man pages, bash completion, the .proto and
# find_package(lossd) (docs/architecture.md#packaging). Nothing is rebuilt here.
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix $(PREFIX)

# The Python client's wheel, built offline: $(BUILD)/python-dist/lossd_client-*.whl
wheel: build
	cmake --build $(BUILD) --target lossd_wheel
	@ls $(BUILD)/python-dist/*.whl

# The Debian package (CPack, in $(BUILD)/packages) and the wheel.
package: wheel
	cd $(BUILD) && cpack -G DEB -B $(abspath $(BUILD))/packages
	@ls $(BUILD)/packages/*.deb $(BUILD)/python-dist/*.whl

# The wheel installed into $(VENV) (python3 -m venv --system-site-packages, pip --no-index).
python-client: wheel
	/usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip uninstall -y -q lossd-client 2>/dev/null || true
	$(VENV)/bin/pip install --no-index -q $(BUILD)/python-dist/lossd_client-*.whl
	@echo "$(VENV)/bin/python3 -m lossd_client status   # or: . $(VENV)/bin/activate"

run: build
	$(BUILD)/daemon/lossd $(RUN_ARGS)

bench: build
	bench/run_all.sh $(BUILD)

# clang-format (.clang-format; bpf/.clang-format for the BPF C) over the tracked sources.
format:
	git ls-files '*.c' '*.h' '*.cc' | grep -v '\.bpf\.c$$' | xargs clang-format -i --style=file
	git ls-files '*.bpf.c' | xargs clang-format -i --style=file:bpf/.clang-format

clean:
	rm -rf $(BUILD) $(CLIENT_BUILD) $(SAN_BUILD)
