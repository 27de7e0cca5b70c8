# lit configuration for attnc's tests. Features: asan, ptxas, sass, slow.
# Substitutions:
#   %attnc, %attnc-opt   the tools under test (from the build tree)
#   FileCheck, not       from LLVM 19
#   %examples            the examples/ folder
#   %attnrt-unit         the runtime's checks without a GPU (test/unit/runtime.c)
#   %libattnrt, %python-src  the runtime library and the Python package
#   %ptxas               a CUDA 12 ptxas: the last to assemble sm_70; sm_80 too (feature ptxas)
#   %sass-ptxas, %cuobjdump  CUDA 13's ptxas and cuobjdump: SASS for sm_90 (feature sass)
#   %sass-check          bench/sass_check.py (instruction counts, local memory in loops)
import os
import lit.formats

config.name = "attnc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".attn", ".ir", ".test"]
config.excludes = ["Inputs", "fuzz", "lit.cfg.py"]
config.test_source_root = os.path.join(config.attnc_src_root, "test")
config.test_exec_root = os.path.join(config.attnc_obj_root, "test")

config.substitutions.append(("%unit-rounding", os.path.join(config.attnc_obj_root, "attnc-unit-rounding")))
config.substitutions.append(("%attnc-opt", os.path.join(config.attnc_obj_root, "attnc-opt")))
config.substitutions.append(("%attnc", os.path.join(config.attnc_obj_root, "attnc")))
config.substitutions.append(("%attnrt-unit", os.path.join(config.attnc_obj_root, "attnrt-unit")))
config.substitutions.append(("%libattnrt", os.path.join(config.attnc_obj_root, "libattnrt.so")))
config.substitutions.append(("%python-src", os.path.join(config.attnc_src_root, "python")))
# A sanitized libattnrt cannot be loaded into a plain python3 (the ASan
# runtime must come first): the Python test runs in the plain build only.
if config.sanitize.upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("asan")
# The long numeric sweeps (REQUIRES: slow) run where asked: lit --param slow=1
# (scripts/test.sh sets it through LIT_OPTS for the plain build, as CI runs it).
if lit_config.params.get("slow", "0") not in ("0", ""):
    config.available_features.add("slow")
if config.ptxas_sm70:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", config.ptxas_sm70))
if config.ptxas_cuda13 and config.cuobjdump:
    config.available_features.add("sass")
    config.substitutions.append(("%sass-ptxas", config.ptxas_cuda13))
    config.substitutions.append(("%cuobjdump", config.cuobjdump))
config.substitutions.append(("%sass-check", "python3 " + os.path.join(config.attnc_src_root, "bench", "sass_check.py")))
config.substitutions.append(("%examples", os.path.join(config.attnc_src_root, "examples")))
config.substitutions.append(("FileCheck", config.filecheck))
config.substitutions.append(("not ", config.not_tool + " "))

# Sanitizer reports abort the process: `not` counts a crash as a failure,
# where a plain non-zero exit would pass as the expected error.
config.environment["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"
config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:abort_on_error=1"
