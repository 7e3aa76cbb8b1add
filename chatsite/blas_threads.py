"""One BLAS thread for the web process (imported first by :mod:`chatsite.asgi`, before
anything loads numpy; OpenBLAS reads its thread count once, when it loads).

The web tier runs no model (DESIGN §2); its numpy work is the input classifier's few
products per text (:mod:`safety.classifiers.embedded`: a 384-d vector against the
~25,000 stored exemplar vectors, 38 MB read, a few milliseconds). OpenBLAS splits
such a product over one thread per core, and its helper threads spin while they wait
for work: on a web process sharing its cores with requests, that doubled the
classifier's CPU and more than doubled its wall time (``bench/api_moderation_cost.py``,
figures in ``bench/results/``). ``OPENBLAS_NUM_THREADS`` set by the operator wins.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
