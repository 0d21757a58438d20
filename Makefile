# The README's two commands:  make run  and  make test.
HOTLINE_VENV ?= $(HOME)/.cache/hotline/venv
PY := $(HOTLINE_VENV)/bin/python
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build test run clean format train fuzz

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
