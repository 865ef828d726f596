import time
from pathlib import Path
import numpy as np, onnxruntime
from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder
e = OnnxEmbedder(quantized_queries=Path.home() / ".cache/ragmcp", quantized_documents=True, workers=1)
path = str(next((Path.home() / ".cache/ragmcp").glob("*dynamic-int8*.onnx")))
def sess(setup):
    o = onnxruntime.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1
    setup(o)
    return onnxruntime.InferenceSession(path, o, providers=["CPUExecutionProvider"])
V = {"default": lambda o: None,
     "no_mem_pattern": lambda o: setattr(o, "enable_mem_pattern", False),
     "no_arena": lambda o: setattr(o, "enable_cpu_mem_arena", False),
     "disable_all": lambda o: setattr(o, "graph_optimization_level", onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL),
     "no_prepack": lambda o: o.add_session_config_entry("session.disable_prepacking", "1"),
}
S = {k: sess(f) for k, f in V.items()}
for n in (2, 22):
    x = list(range(1000, 1000 + n))
    res = {k: [] for k in S}
    for r in range(3):
        for k, s in S.items():
            for _ in range(10): e._run(s, [x])
            t = time.process_time()
            for _ in range(150): e._run(s, [x])
            res[k].append(round((time.process_time() - t) * 1000 / 150, 3))
    for k, v in res.items(): print(n, f"{k:15s}", v)
