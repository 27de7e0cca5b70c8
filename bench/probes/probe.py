"""probe.py — builds one of this folder's CUDA probes with nvcc and runs it."""
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def run_probe(name, out):
    """Builds HERE/NAME.cu into OUT/NAME (sm_90), runs it, prints and returns its output."""
    os.makedirs(out, exist_ok=True)
    exe = os.path.join(out, name)
    subprocess.run(["/usr/local/cuda/bin/nvcc", "-O3", "-arch=sm_90", "-o", exe, os.path.join(HERE, name + ".cu")],
                   check=True)
    text = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    print(text, end="")
    return text
