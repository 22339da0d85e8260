# vgpu: build, test and the portable release build.
#
#   make build          cargo build --release (for this machine's glibc)
#   make test           the workspace's tests (what CI runs, without fmt/clippy)
#   make sim            the quick start without a GPU: the simulated driver in target/sim, then
#                       doctor, a refused allocation, an SM-limited run and status
#   make dist           dist/libvgpu.so and dist/vgpu for x86_64, glibc >= 2.17
#   make install        dist/ into PREFIX (default /usr/local): bin/vgpu, lib/vgpu/libvgpu.so,
#                       shell completions and man pages
#   make dist-aarch64   dist/aarch64/{libvgpu.so,vgpu} for aarch64, glibc >= 2.17
#   make check-dist     glibc versions of dist/ + the simulator suite against dist/libvgpu.so
#   make test-aarch64   the driver suite for aarch64 under qemu (glibc 2.31 sysroot)
#   make bullseye-check dist/ loads and enforces in a Debian bullseye chroot (glibc 2.31)
#   make image          the library image (dockerfiles/Dockerfile) from dist/, tagged $(IMAGE)
#   make image-device-plugin DEVICE_PLUGIN_IMAGE=projecthami/hami:v2.10.0 [PLUGIN_TAG=...]
#                       HAMi's or Volcano's device-plugin image with vgpu in HAMi-core's place
#   make image-exporter the exporter image (dockerfiles/Dockerfile.exporter) from dist/, tagged $(EXPORTER_IMAGE)
#   make image-check    the exporter image's root file system built and started on a stand-in node
#                       (no daemon needed); with a Docker daemon also the library and plugin images
#   make tools          pip/rustup installs the dist build needs (zig, cargo-zigbuild, targets)
#   make clean          remove dist/ and cargo's target/
#
# The dist build links with zig against glibc 2.17's symbol set (cargo-zigbuild's
# `<triple>.2.17` targets), so the library loads through /etc/ld.so.preload in CentOS 7, UBI 8,
# Ubuntu 18.04/20.04 images as well as new ones. Built libraries are stripped of debug info.

CARGO       ?= cargo
GLIBC       ?= 2.17
X86         := x86_64-unknown-linux-gnu
ARM         := aarch64-unknown-linux-gnu
DIST        ?= dist
# Where cargo builds (it honours CARGO_TARGET_DIR; so does every path here).
TARGET_DIR  ?= $(or $(CARGO_TARGET_DIR),target)
VERSION     := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
IMAGE       ?= vgpu:$(VERSION)
EXPORTER_IMAGE ?= vgpu-exporter:$(VERSION)
ZIGBUILD    := $(CARGO) zigbuild --release --locked -p vgpu-preload -p vgpu-cli
# llvm-objcopy (rustup's llvm-tools) reads both architectures; binutils' objcopy only the host's.
LLVM_BIN    := $(shell rustc --print sysroot 2>/dev/null)/lib/rustlib/$(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')/bin
OBJCOPY     ?= $(LLVM_BIN)/llvm-objcopy
# Pinned versions of the PyPI packages that provide zig and cargo-zigbuild.
ZIGLANG_VERSION       ?= 0.17.1
CARGO_ZIGBUILD_VERSION ?= 0.24.1

.PHONY: all build test sim dist install dist-aarch64 check-dist test-dist test-aarch64 bullseye-check \
        image image-exporter image-device-plugin image-check tools need-zig clean

all: build

build:
	$(CARGO) build --release --locked --workspace

test:
	$(CARGO) test --workspace --locked

sim:
	CARGO=$(CARGO) scripts/sim-quickstart.sh

tools:
	python3 -m pip install "ziglang==$(ZIGLANG_VERSION)" "cargo-zigbuild==$(CARGO_ZIGBUILD_VERSION)"
	rustup target add $(X86) $(ARM)
	rustup component add llvm-tools

need-zig:
	@command -v cargo-zigbuild >/dev/null && python3 -m ziglang version >/dev/null 2>&1 && \
	  command -v $(OBJCOPY) >/dev/null || \
	  { echo "make: the dist build needs zig, cargo-zigbuild and llvm-objcopy: run 'make tools'" \
	         "(pip install ziglang cargo-zigbuild; rustup component add llvm-tools)" >&2; exit 1; }

# $(call install-bin,SRC,DST): copy without debug info (symbols stay for backtraces).
define install-bin
	@mkdir -p $(dir $(2))
	$(OBJCOPY) --strip-debug $(1) $(2).tmp && chmod 0755 $(2).tmp && mv -f $(2).tmp $(2)
endef

dist: need-zig
	$(ZIGBUILD) --target $(X86).$(GLIBC)
	$(call install-bin,$(TARGET_DIR)/$(X86)/release/libvgpu.so,$(DIST)/libvgpu.so)
	$(call install-bin,$(TARGET_DIR)/$(X86)/release/vgpu,$(DIST)/vgpu)
	scripts/check-glibc.sh --max $(GLIBC) $(DIST)/libvgpu.so $(DIST)/vgpu
	@# shell completions and man pages, generated from the CLI's own definitions
	@mkdir -p $(DIST)/share/bash-completion/completions $(DIST)/share/zsh/vendor-completions \
	  $(DIST)/share/fish/vendor_completions.d $(DIST)/share/man/man1
	$(DIST)/vgpu completions bash > $(DIST)/share/bash-completion/completions/vgpu
	$(DIST)/vgpu completions zsh > $(DIST)/share/zsh/vendor-completions/_vgpu
	$(DIST)/vgpu completions fish > $(DIST)/share/fish/vendor_completions.d/vgpu.fish
	$(DIST)/vgpu man --out $(DIST)/share/man/man1

# make install [PREFIX=/usr/local]: the dist artifacts, completions and man pages into PREFIX
# (the library goes to PREFIX/lib/vgpu/libvgpu.so: name that path in LD_PRELOAD or
# /etc/ld.so.preload).
PREFIX ?= /usr/local
install: dist
	install -D -m 0755 $(DIST)/libvgpu.so $(DESTDIR)$(PREFIX)/lib/vgpu/libvgpu.so
	install -D -m 0755 $(DIST)/vgpu $(DESTDIR)$(PREFIX)/bin/vgpu
	cp -R $(DIST)/share/. $(DESTDIR)$(PREFIX)/share/

dist-aarch64: need-zig
	$(ZIGBUILD) --target $(ARM).$(GLIBC)
	$(call install-bin,$(TARGET_DIR)/$(ARM)/release/libvgpu.so,$(DIST)/aarch64/libvgpu.so)
	$(call install-bin,$(TARGET_DIR)/$(ARM)/release/vgpu,$(DIST)/aarch64/vgpu)
	scripts/check-glibc.sh --max $(GLIBC) $(DIST)/aarch64/libvgpu.so $(DIST)/aarch64/vgpu

# The dist artifacts against the simulators (built normally): symbol versions, then the
# integration suites with VGPU_TEST_LIB pointing at dist/libvgpu.so (crates/vgpu-tests/tests/dist.rs
# also runs dist/vgpu doctor and checks every versioned symbol).
check-dist test-dist:
	@test -f $(DIST)/libvgpu.so -a -f $(DIST)/vgpu || { echo "make: run 'make dist' first" >&2; exit 1; }
	scripts/check-glibc.sh --max $(GLIBC) $(wildcard $(DIST)/libvgpu.so $(DIST)/vgpu $(DIST)/aarch64/libvgpu.so $(DIST)/aarch64/vgpu)
	VGPU_TEST_LIB=$(CURDIR)/$(DIST)/libvgpu.so $(CARGO) test --locked -p vgpu-tests -p vgpu-cli

test-aarch64: dist-aarch64
	scripts/test-aarch64.sh

bullseye-check:
	scripts/bullseye-check.sh

image:
	@test -f $(DIST)/libvgpu.so -a -f $(DIST)/vgpu || { echo "make: run 'make dist' first" >&2; exit 1; }
	docker build -f dockerfiles/Dockerfile -t $(IMAGE) .

image-exporter:
	@test -f $(DIST)/vgpu || { echo "make: run 'make dist' first" >&2; exit 1; }
	docker build -f dockerfiles/Dockerfile.exporter -t $(EXPORTER_IMAGE) .

image-device-plugin: image
	@test -n "$(DEVICE_PLUGIN_IMAGE)" || { echo "make: set DEVICE_PLUGIN_IMAGE (e.g. docker.io/projecthami/hami:v2.10.0)" >&2; exit 1; }
	docker build -f dockerfiles/Dockerfile.device-plugin --build-arg DEVICE_PLUGIN_IMAGE=$(DEVICE_PLUGIN_IMAGE) \
	  --build-arg VGPU_IMAGE=$(IMAGE) -t $(or $(PLUGIN_TAG),$(DEVICE_PLUGIN_IMAGE)-vgpu$(subst vgpu:,,$(IMAGE))) .

image-check:
	scripts/image-check.sh

clean:
	rm -rf $(DIST)
	$(CARGO) clean
