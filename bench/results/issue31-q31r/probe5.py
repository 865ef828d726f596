import json
from pathlib import Path
import numpy as np
from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder
qs = [json.loads(l)["text"] for l in open("/work/shared/eval/scifact/queries.jsonl")][:200]
e = OnnxEmbedder(quantized_queries=Path.home() / ".cache/ragmcp", quantized_documents=True, workers=1)
enc = [x.ids for x in e._tokenizer.encode_batch(qs)]
single = np.stack([e._run(e._query_session, [x])[0] for x in enc])
batched = np.concatenate([e._run(e._query_session, enc[i:i + 5]) for i in range(0, 200, 5)])
cos = (single * batched).sum(1)
print("batch-of-5 vs one run a phrase: min cos", cos.min(), "mean", cos.mean(), "max abs diff", np.abs(single - batched).max())
