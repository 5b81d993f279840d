#!/usr/bin/env bash
# What the GPU host offers: driver, versions, ncu counters. Run first on a new GPU host.
set -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.draw --format=csv
python3 - <<'PY'
import torch, platform
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version())
try:
    import triton; print("triton", triton.__version__)
except Exception as e:
    print("triton missing", e)
p = torch.cuda.get_device_properties(0)
print(p)
try:
    import pynvml; pynvml.nvmlInit(); print("nvml ok", pynvml.nvmlSystemGetDriverVersion())
except Exception as e:
    print("nvml", e)
PY
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
$NCU --version | tail -1
cat > /tmp/ncu_probe.py <<'PY'
import torch
x = torch.randn(1 << 24, device="cuda")
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
y = x * 2
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
PY
$NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active --csv --print-units base python3 /tmp/ncu_probe.py 2>&1 | tail -5
