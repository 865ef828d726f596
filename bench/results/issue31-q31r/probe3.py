import time
from pathlib import Path
import numpy as np
from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder
e = OnnxEmbedder(quantized_queries=Path.home() / ".cache/ragmcp", quantized_documents=True, workers=1)
for n in (2, 8, 22, 64, 128):
    x = list(range(1000, 1000 + n))
    for _ in range(20): e._run(e._query_session, [x])
    t = time.process_time()
    for _ in range(200): e._run(e._query_session, [x])
    print(n, "tokens: CPU ms/run", round((time.process_time() - t) * 1000 / 200, 3))
