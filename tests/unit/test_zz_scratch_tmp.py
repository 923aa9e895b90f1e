import time
import torch
from conftest import one_thread, sentences
from nmt_cli import Translator
from nmt_cli.search import Sampling
from nmt_cli.workers import can_fork


def test_explore(trained, corpus):
    t0 = time.time()
    with one_thread():
        tr = Translator.load(trained.checkpoint, device="cpu")
        lines = corpus.test_src[:30]
        beam = tr.translate(lines)
        for T in (1.0, 1.5, 2.0):
            for k in (0, 10):
                a = tr.translate(lines, sampling=Sampling("topk", topk=k, temperature=T, seed=1))
                b = tr.translate(lines, sampling=Sampling("topk", topk=k, temperature=T, seed=2))
                print(T, k, sum(x != y for x, y in zip(a, beam)), sum(x != y for x, y in zip(a, b)))
        big = sentences(100, seed=7)
        s = Sampling("topk", topk=0, temperature=1.5, seed=3)
        one = tr.translate(big, sampling=s)
        small_batches = tr.translate(big, sampling=s, batch_tokens=16)
        print("batch dep", sum(x != y for x, y in zip(one, small_batches)))
        print(can_fork())
        tr.start_workers(2)
        try:
            two = tr.translate(big, sampling=s)
            two30 = tr.translate(lines, sampling=s)
        finally:
            tr.close()
        one30 = tr.translate(lines, sampling=s)
        print("workers 100", sum(x != y for x, y in zip(one, two)))
        print("workers 30", sum(x != y for x, y in zip(one30, two30)))
    print("time", time.time() - t0)
