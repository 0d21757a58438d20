# The README's two commands:  make run  and  make test.
HOTLINE_VENV ?= $(HOME)/.cache/hotline/venv
PY := $(HOTLINE_VENV)/bin/python
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build test run clean format train fuzz check-sanitize

all: build

setup:
	HOTLINE_VENV=$(HOTLINE_VENV) bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD) -G Ninja -DHOTLINE_PYTHON=$(PY) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1200

# Each libFuzzer target for 60 s (fuzz/CMakeLists.txt; needs clang).
fuzz: build
	cmake --build $(BUILD) --target fuzz

# Every C++ unit test (ctest label "unit") under AddressSanitizer + UBSan, CUDA off, in its own
# build dir; any sanitizer report fails the test. make test runs a fast subset of these too.
BUILD_ASAN ?= build-asan
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
check-sanitize: setup
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DHOTLINE_PYTHON=$(PY) -DHOTLINE_SANITIZE=ON \
	  -DHOTLINE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS) --target unit_tests
	cd $(BUILD_ASAN) && $(SANITIZER_ENV) ctest -L unit --output-on-failure -j $(JOBS) --timeout 1800

run: build
	HOTLINE_PYTHON=$(PY) bash scripts/run.sh $(BUILD)/hotline

# A city's own dispatcher from its labelled orders (training/city.py; README "Train your own").
train: setup
	@test -n "$(DATA)" || { echo "usage: make train DATA=orders.jsonl OUT=models/NAME [INIT=models/haikou] [UPDATE=1]"; exit 2; }
	$(PY) training/city.py --data "$(DATA)" --out "$(or $(OUT),models/city)" $(if $(INIT),--init "$(INIT)") $(if $(UPDATE),--update)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
