# A few fast, meaningful unit tests again under AddressSanitizer + UBSan in every build and so in
# `make test` (ctest sanitize_*, label "sanitize"): this source tree configured with
# HOTLINE_SANITIZE=ON in <build>/sanitize, only these targets built (about 3 min on 2 cores).
# `make check-sanitize` runs every unit test that way (its own build dir).
option(HOTLINE_SANITIZE_SUBSET "Build and test a sanitized subset of the unit tests" ON)
if(NOT HOTLINE_SANITIZE_SUBSET)
  message(STATUS "hotline: sanitized test subset off (HOTLINE_SANITIZE_SUBSET=OFF)")
  return()
endif()
# Path of each test binary under the build tree: UTF-8, tokenizer, PII masking, slot normalisers.
set(san_tests tests/base/base_test tests/text/text_test tests/nlu/normalize/normalize_test)
set(san_bin ${PROJECT_BINARY_DIR}/sanitize)
set(san_targets)
foreach(rel ${san_tests})
  get_filename_component(name ${rel} NAME)
  list(APPEND san_targets --target ${name})
endforeach()
include(ExternalProject)
ExternalProject_Add(hotline_sanitize
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${san_bin}
  CMAKE_ARGS -DHOTLINE_SANITIZE=ON -DHOTLINE_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
             -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
             -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER} -DHOTLINE_PYTHON=${HOTLINE_PYTHON}
  BUILD_COMMAND ${CMAKE_COMMAND} --build ${san_bin} -j 2 ${san_targets}
  BUILD_ALWAYS ON  # the sources are this tree: let the inner build decide what is stale
  INSTALL_COMMAND "")
# Any ASan or UBSan report fails the test (the build also has -fno-sanitize-recover=all).
set(HOTLINE_SANITIZER_ENV
    ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
foreach(rel ${san_tests})
  get_filename_component(name ${rel} NAME)
  get_filename_component(dir ${rel} DIRECTORY)
  add_test(NAME sanitize_${name}
           COMMAND ${CMAKE_COMMAND} -E env ${HOTLINE_SANITIZER_ENV} ${san_bin}/${rel}
           WORKING_DIRECTORY ${san_bin}/${dir})
  set_tests_properties(sanitize_${name} PROPERTIES TIMEOUT 600 LABELS sanitize)
endforeach()
