"""A bounded subset of PyTorch's op corpus (opinfo_corpus.py) on 2 ranks, values and gradients:
hyper must give no wrong value and no hang (the full run is one command; its report is
docs/opinfo_corpus.md)."""

import json
import os

from conftest import torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ("abs,add,sub,mul,div,neg,exp,tanh,sigmoid,nn.functional.relu,nn.functional.gelu,"
       "nn.functional.silu,where,clamp,pow,sum,mean,amax,amin,prod,softmax,log_softmax,mm,"
       "matmul,bmm,addmm,t,transpose,permute,view,reshape,flatten,squeeze,unsqueeze,cat,stack,"
       "split,chunk,narrow,select,index_select,gather,cumsum,sort,topk,layer_norm,"
       "nn.functional.linear,nn.functional.embedding,clone,contiguous,masked_fill,tril,triu,"
       "acos,special.i1,nn.functional.hardshrink,linalg.det,linalg.svd,linalg.solve,fft.rfft,"
       "fft.irfft,rot90,addmv,permute_copy")


def test_no_wrong_values_and_no_hangs(tmp_path):
    out = tmp_path / "corpus.json"
    code, log, timed_out = torchrun(
        2, [os.path.join(HERE, "opinfo_corpus.py"), "--ops", OPS, "--samples", "2",
            "--timeout", "20", "--json", str(out)], 600)
    if timed_out:
        raise AssertionError(f"the corpus run did not finish in 600 s:\n{log[-3000:]}")
    assert code == 0 and out.exists(), log[-3000:]
    report = json.loads(out.read_text())
    hyper = report["summary"]["hyper"]
    bad = {k: v for k, v in report["examples"].items()
           if k.startswith("hyper|") and k.split("|")[2] in ("wrong", "hang")}
    assert hyper["wrong"] == 0 and hyper["hang"] == 0, json.dumps(bad, indent=1)
    assert report["ops"] >= 60 and hyper["correct"] >= 45, json.dumps(report["summary"])
