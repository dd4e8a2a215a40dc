"""How much page-locked host memory this machine grants: pins 4 GiB chunks with torch until
cudaHostAlloc fails or MAX_GIB (the first argument, default 200) is reached; prints the total
(GiB) as the last line. Usage: python3 scripts/gpu/pin_probe.py [MAX_GIB]"""
import sys
import torch

max_gib = int(sys.argv[1]) if len(sys.argv) > 1 else 200
chunks = []
try:
    while 4 * len(chunks) < max_gib:
        chunks.append(torch.empty(4 << 30, dtype=torch.uint8, pin_memory=True))
except RuntimeError as e:
    print(f"pinning stopped: {str(e).splitlines()[0]}")
print(4 * len(chunks))
