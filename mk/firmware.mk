# Firmware (EDK2): OVMF.fd and CLOUDHV.fd with ZeroStartPkg, and its tests.
#   make firmware         build both images into $(ZEROSTART_CACHE)/firmware/<hash>/
#   make firmware-ovmf    OVMF.fd alone into the same directory (make demo)
#   make test-firmware    host unit tests of ZeroHintLib + QEMU TCG boots of OVMF.fd
#   make firmware-timing  firmware time, 1/4 GiB x 1/2 vCPUs x with/without scrub
# See firmware/README.md.

FW_DIR = $(shell bash firmware/build.sh --print-dir)
FW_UNIT_BIN = $(ZEROSTART_CACHE)/firmware/unit/test_zerohint
FW_UNIT_SRC = tests/firmware/unit/test_zerohint.c \
	firmware/ZeroStartPkg/Library/ZeroHintLib/ZeroHint.c \
	firmware/ZeroStartPkg/Library/ZeroHintLib/ZeroHintText.c \
	firmware/ZeroStartPkg/Library/ZeroHintLib/ZeroRange.c

.PHONY: firmware firmware-ovmf test-firmware test-firmware-unit test-firmware-qemu firmware-timing

firmware:
	@$(PROGRESS) "firmware (OVMF.fd, CLOUDHV.fd)" 600 bash firmware/build.sh

# OVMF.fd alone, into the same directory: all `make demo` boots.
firmware-ovmf:
	@$(PROGRESS) "firmware (OVMF.fd)" 300 env FW_PLATFORMS=ovmf bash firmware/build.sh

# Plain gcc, no EDK2: the same ZeroHintLib sources the firmware links.
test-firmware-unit:
	@mkdir -p $(dir $(FW_UNIT_BIN))
	gcc -std=gnu11 -O1 -g -Wall -Wextra -Werror -fsanitize=address,undefined -fno-sanitize-recover=all \
		-DZSHINT_HOST -Ifirmware/ZeroStartPkg/Include -Itests/vectors \
		$(FW_UNIT_SRC) -o $(FW_UNIT_BIN)
	$(FW_UNIT_BIN)

# The linux case boots Debian's cloud kernel (apt-get download, cached).
test-firmware-qemu: firmware vmm-argv
	bash tests/firmware/qemu/prepare_linux.sh >/dev/null
	ZEROSTART_BIN=$(VMM_ARGV_BIN) python3 tests/firmware/qemu/run_tests.py --fw-dir "$(FW_DIR)" --linux-dir "$(ZEROSTART_CACHE)/firmware/linux"

test-firmware: test-firmware-unit test-firmware-qemu

firmware-timing: firmware vmm-argv
	ZEROSTART_BIN=$(VMM_ARGV_BIN) python3 tests/firmware/qemu/run_tests.py --fw-dir "$(FW_DIR)" --timing --prealloc
	ZEROSTART_BIN=$(VMM_ARGV_BIN) python3 tests/firmware/qemu/run_tests.py --fw-dir "$(FW_DIR)" --timing

TEST_TARGETS += test-firmware
