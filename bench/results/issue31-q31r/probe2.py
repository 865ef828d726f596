"""CPU ms per query (serial, one run per phrase) of query-model variants, interleaved; and vector agreement."""
import json, time, sys
from pathlib import Path
import numpy as np, onnxruntime
from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder
from ragmcp_bench.embed_bench import variant_path
qs = [json.loads(l)["text"] for l in open("/work/shared/eval/scifact/queries.jsonl")][:300]
models = Path("/tmp/q31r/models")
e = OnnxEmbedder(quantized_queries=Path.home() / ".cache/ragmcp", quantized_documents=True, workers=1)
def sess(path, **cfg):
    o = onnxruntime.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1
    for k, v in cfg.items(): o.add_session_config_entry(k, v)
    return onnxruntime.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
enc = [x.ids for x in e._tokenizer.encode_batch(qs)]
S = {"int8(today)": e._query_session, "fused-int8": sess(variant_path("fused-int8", models)),
     "int8+dnz": sess(variant_path("int8", models), **{"session.set_denormal_as_zero": "1"})}
ref = np.stack([e._run(e._query_session, [x])[0] for x in enc])
for k, s in S.items():
    v = np.stack([e._run(s, [x])[0] for x in enc]); print(k, "min cos vs today", float((v * ref).sum(1).min()))
res = {k: [] for k in S}
for r in range(3):
    for k, s in S.items():
        t = time.process_time()
        for x in enc: e._run(s, [x])
        res[k].append(round((time.process_time() - t) * 1000 / len(enc), 3))
for k, v in res.items(): print(f"{k:14s} CPU ms/query {v}")
