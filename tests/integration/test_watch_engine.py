"""`phasescope watch --once --json` against the real embedded llama-server under a small load."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

pytestmark = pytest.mark.engine


class Load:
    """A few concurrent short /completion requests, sent back to back from threads until stopped."""

    def __init__(self, url: str, workers: int = 4, n_predict: int = 6) -> None:
        self.url, self.n_predict = url, n_predict
        self.stop = threading.Event()
        self.done = 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(workers)]

    def _run(self, i: int) -> None:
        k = 0
        while not self.stop.is_set():
            body = json.dumps({"prompt": f"Worker {i} request {k}: write one line about rivers", "n_predict": self.n_predict,
                               "cache_prompt": False, "ignore_eos": True, "temperature": 0}).encode()
            req = urllib.request.Request(self.url + "/completion", data=body, headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=120).read()
            self.done += 1
            k += 1

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)


def test_watch_once_json_under_load_shows_running_and_token_rates(engine):
    with Load(engine.url) as load:
        deadline = time.monotonic() + 60
        while load.done < 1 and time.monotonic() < deadline:  # the load is flowing
            time.sleep(0.2)
        # a scrape can land in the gap between two requests of every worker; and llama.cpp counts a prompt's
        # tokens when its prefill ends, a reply's when it ends, so on a loaded host (a clean-clone run beside two
        # spinners) a 4 s window saw replies finish but no prefill end: prompt_tok_s 0. Each rate is asserted
        # from a window that saw its counter move.
        for _attempt in range(4):
            r = subprocess.run([sys.executable, "-m", "phasescope", "watch", engine.url, "--once", "--json",
                                "--interval", "4"], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            d = json.loads(r.stdout)
            if d["running"] and d["generation_tok_s"] and d["prompt_tok_s"]:
                break
    assert d["engine"] == "llamacpp"
    assert d["running"] > 0
    assert d["generation_tok_s"] > 0
    assert d["prompt_tok_s"] > 0
    assert d["prefill_speed_tok_s"] > 0
    assert 0 < d["itl_mean_s"] < 5
    # llama.cpp exports no latency histograms: null, and said so
    for k in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "kv_usage"):
        assert d[k] is None
    assert any("no TTFT/ITL histograms" in n for n in d["notes"])
    assert d["waiting"] is not None and d["prefix_cache_hit_rate"] is not None
