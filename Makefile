# The classic entry points for people and packagers (docs/install.md):
#   make                  build the release programs and the install tool
#   sudo make install     install the whole layout under $(PREFIX) (below $(DESTDIR) if set)
#   make deb              a Debian package of the layout
# All the work is done by `cargo xtask` (crates/xtask); `make install` runs the tool
# already built, so root needs no Rust toolchain. Built with CARGO_TARGET_DIR set? Pass
# it to `sudo make install` too (sudo drops it).
PREFIX ?= /usr/local
DESTDIR ?=
PROFILE ?= release
CARGO ?= cargo
TARGET := $(or $(CARGO_TARGET_DIR),target)
XTASK := $(TARGET)/debug/xtask

all:
	$(CARGO) build --profile $(PROFILE) --workspace --exclude quaver-xtask
	$(CARGO) build -p quaver-xtask

install:
	$(XTASK) install --no-build --profile $(PROFILE) --target-dir $(TARGET) \
		--prefix $(PREFIX) $(if $(DESTDIR),--destdir $(DESTDIR))

deb: all
	$(XTASK) deb --no-build --profile $(PROFILE) --target-dir $(TARGET)

.PHONY: all install deb
