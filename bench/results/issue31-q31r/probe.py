"""CPU ms per 5-phrase group of SciFact queries, query session variants, interleaved."""
import json, time, sys, statistics
from pathlib import Path
import numpy as np, onnxruntime
from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder
qs = [json.loads(l)["text"] for l in open("/work/shared/eval/scifact/queries.jsonl")][:400]
groups = [qs[i:i+5] for i in range(0, 400, 5)]
cache = Path.home() / ".cache/ragmcp"
e = OnnxEmbedder(quantized_queries=cache, quantized_documents=True, workers=2)
toks = [len(x.ids) for x in e._tokenizer.encode_batch(qs)]
print("tokens/query mean", statistics.mean(toks), "median", statistics.median(toks), "max", max(toks))
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(5)
qpath = str(e._session._model_path) if hasattr(e._session, "_model_path") else None
def session(level, intra):
    o = onnxruntime.SessionOptions(); o.intra_op_num_threads = intra; o.inter_op_num_threads = 1
    o.graph_optimization_level = level
    return onnxruntime.InferenceSession(str(next(cache.glob("*dynamic-int8*.onnx"))), o, providers=["CPUExecutionProvider"])
def today(g):  # as SearchService: one embed_queries([p]) per phrase, from 5 threads
    list(pool.map(lambda p: e.embed_queries([p]), g))
def one_call(g):  # one embed_queries of all 5 (5 runs of batch 1 over the embed pool)
    e.embed_queries(g)
def batched(sess):
    def f(g):
        enc = [x.ids for x in e._tokenizer.encode_batch(g)]
        e._run(sess, enc)
    return f
def serial(sess):
    def f(g):
        for x in e._tokenizer.encode_batch(g):
            e._run(sess, [x.ids])
    return f
variants = {"today": today, "one_call": one_call,
  "serial_all_1t": serial(session(onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL, 1)),
  "batch5_all_1t": batched(session(onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL, 1)),
  "batch5_all_2t": batched(session(onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL, 2)),
  "serial_ext_1t": serial(session(onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, 1)),
  "serial_basic_1t": serial(session(onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC, 1)),
}
only = sys.argv[1:] or list(variants)
for f in variants.values(): f(groups[0])
res = {k: [] for k in only}
for rnd in range(3):
    for k in only:
        t0 = time.process_time()
        for g in groups[1:]:
            variants[k](g)
        res[k].append(round((time.process_time()-t0)*1000/len(groups[1:]), 2))
for k, v in res.items(): print(f"{k:18s} CPU ms/group {v}")
