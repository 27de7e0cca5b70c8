"""peak-memory.py LIMIT_MB CMD... — runs CMD and prints its peak resident
memory (ru_maxrss of the child); exits 1 when CMD fails or its peak passes
LIMIT_MB. For tests of what a compile costs (compile-time.test)."""
import resource
import subprocess
import sys

limit, cmd = float(sys.argv[1]), sys.argv[2:]
rc = subprocess.run(cmd).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"peak {peak:.0f} MB (limit {limit:.0f} MB)")
sys.exit(1 if rc or peak > limit else 0)
