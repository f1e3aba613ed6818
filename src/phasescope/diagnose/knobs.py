"""What to change, per cause, in each engine's own terms.

Flags and defaults follow each engine's own documentation and argument parser (vLLM 0.33, SGLang 0.5.23, TGI 3.3,
llama.cpp at 0c1e570, Ollama 0.33) and the seed article's "what to change" lists. One topic per
cause; :func:`advice_for` returns the entries for the detected engine (plus engine-neutral ones),
or every engine's entries when the engine is unknown.

:func:`tailored` sets them against what the server is and runs (:class:`~phasescope.diagnose.settings.ServerSettings`:
its current flags, and its backend — a CPU server is not told to offload layers to a GPU) and states what a
change costs, from this run's own numbers (:class:`~phasescope.diagnose.tradeoffs.PrefillCost`: a smaller
prefill piece shortens each stall but lengthens every long prompt's prefill).
:func:`~phasescope.diagnose.tradeoffs.reconcile` then makes sure two pieces of advice in one run never pull
one setting opposite ways.
"""

from __future__ import annotations

from typing import Any

from phasescope.diagnose.findings import Advice
from phasescope.diagnose.tradeoffs import PrefillCost, TunedAdvice, split_cost

ENGINES = ("vllm", "sglang", "tgi", "llamacpp", "ollama")

A = Advice


KNOBS: dict[str, list[Advice]] = {
    # TTFT is mostly waiting for a slot / a place in the KV pool
    "queueing": [
        A("any", "check the queue before blaming the model", "a request that waits has not started its prefill; more capacity, not a faster model, fixes it"),
        A("vllm", "--max-num-seqs (raise) and --gpu-memory-utilization (raise, e.g. 0.92→0.95)", "more sequences run per step and the KV pool holds more of them; vllm:num_requests_waiting > 0 means requests wait"),
        A("vllm", "--max-model-len (lower) or --kv-cache-dtype fp8", "each sequence reserves less KV, so more fit in the pool"),
        A("sglang", "--max-running-requests (raise) and --mem-fraction-static (raise)", "more running requests and a larger KV pool"),
        A("tgi", "--max-batch-total-tokens / --max-concurrent-requests (raise), --cuda-memory-fraction", "a larger batch budget lets queued requests join"),
        A("llamacpp", "--parallel N (more slots) with --ctx-size N × the context one request needs", "each slot serves one request; with -np set each slot gets ctx-size/N tokens"),
        A("ollama", "OLLAMA_NUM_PARALLEL (default 1) and OLLAMA_CONTEXT_LENGTH sized to fit", "one parallel slot means every other request queues; memory grows with NUM_PARALLEL × context"),
        A("any", "add replicas behind a load balancer when one server is saturated", "capacity beyond one device's KV pool"),
    ],
    "prefix_cache": [
        A("any", "keep the shared part (system prompt, tools, documents) byte-identical at the very start of every prompt", "caches match prefixes only; anything that changes early (a date, a user id) defeats them"),
        A("vllm", "--enable-prefix-caching (on by default in V1; check it is not disabled with --no-enable-prefix-caching)", "the shared prefix's KV is computed once and reused"),
        A("sglang", "do not pass --disable-radix-cache (RadixAttention caches prefixes by default)", "the radix cache reuses shared prefixes"),
        A("tgi", "keep prefix caching on (TGI 3 default, PREFIX_CACHING=1 with flashinfer/flashdecoding attention)", "TGI reuses cached prefix blocks when its attention backend supports it"),
        A("llamacpp", "send cache_prompt: true (default), do not start with --no-cache-prompt; add --cache-reuse 256; keep --ctx-checkpoints (SWA models)", "the slot keeps the previous prompt's KV; --cache-reuse also reuses shifted chunks"),
        A("ollama", "set keep_alive (e.g. -1 or 30m) and a num_ctx that fits the whole prompt", "an unloaded model, or a prompt truncated to num_ctx, loses the cached prefix"),
    ],
    # a chat's history prefilled again every turn (issue 17, experiment "conversation")
    "conversation_cache": [
        A("any", "send the history unchanged: the same system prompt and earlier turns byte for byte, the reply as the server wrote it", "any edit early in the history (a timestamp, a re-rendered message) ends the cached prefix there"),
        A("vllm", "--enable-prefix-caching (on by default in V1; not --no-enable-prefix-caching) and enough KV pool (--gpu-memory-utilization) to keep sessions between turns", "the history's blocks stay cached while the user thinks; a small pool evicts them before the next turn"),
        A("sglang", "keep the radix cache (no --disable-radix-cache); raise --mem-fraction-static for many long sessions", "RadixAttention reuses each session's history; evicted branches are prefilled again"),
        A("llamacpp", "cache_prompt: true (default) and --cache-reuse 256; pin each session to a slot (id_slot) or use --parallel ≥ the concurrent sessions; keep --ctx-checkpoints on SWA models", "a slot keeps only its last prompt: sessions that share a slot overwrite each other's history"),
        A("ollama", "num_ctx large enough for the whole history and keep_alive (e.g. 30m) longer than the think time", "a history truncated to num_ctx, or an unloaded model, starts every turn from nothing"),
        A("tgi", "keep prefix caching on (TGI 3 default with flashinfer/flashdecoding attention)", "cached prefix blocks serve the repeated history"),
    ],
    "prefill_slow": [
        A("any", "shorten the prompt, especially the system prompt", "prefill cost grows with prompt tokens and the system prompt is paid on every request"),
        A("vllm", "--max-num-batched-tokens (raise)", "more prefill tokens per step shortens TTFT (at the cost of ITL for running streams)"),
        A("sglang", "--chunked-prefill-size / --max-prefill-tokens (raise)", "more prefill tokens per step"),
        A("tgi", "--max-batch-prefill-tokens (raise)", "more prefill tokens per batch"),
        A("llamacpp", "-b/-ub (raise, e.g. -ub 1024 on GPU), -fa on, -ngl 99 (all layers on the GPU)", "bigger micro-batches and flash attention speed up prompt processing"),
        A("ollama", "num_batch (raise) and check `ollama ps` shows the model 100% on GPU", "layers left on the CPU make prefill compute-starved"),
        A("any", "a GPU with more compute (prefill is compute-bound)", "unlike decode, prefill speeds up with FLOPs"),
    ],
    "interference": [
        A("vllm", "--max-num-batched-tokens (lower, e.g. 2048) with chunked prefill on (--enable-chunked-prefill, default)", "smaller chunks interrupt running decodes for less time; vLLM's tuning guide trades ITL against TTFT with this one number"),
        A("sglang", "--chunked-prefill-size (lower, e.g. 2048)", "a long prompt is mixed into decode batches in smaller pieces"),
        A("tgi", "--max-batch-prefill-tokens (lower)", "limits how much prefill joins one forward pass"),
        A("llamacpp", "-b and -ub (lower, e.g. -b 512 -ub 512)", "llama-server splits a long prompt into n_batch pieces and decodes the other slots between them"),
        A("ollama", "num_batch (lower)", "smaller prompt batches stall running streams for less time"),
        A("any", "route long-prompt requests to a separate replica (prefill/decode disaggregation at scale)", "a long prompt then never lands in the middle of another user's stream"),
    ],
    "decode_at_ceiling": [
        A("any", "quantize the weights (8-bit roughly halves the bytes read per token, 4-bit quarters them)", "decode reads every weight once per token; fewer bytes per weight raises the ceiling"),
        A("any", "a smaller model, or a device with more memory bandwidth", "the ceiling is bandwidth ÷ bytes read per token; more compute does not help decode"),
        A("vllm", "--quantization fp8 or an AWQ/GPTQ checkpoint", "fewer bytes per token"),
        A("sglang", "--quantization fp8 or an AWQ/GPTQ checkpoint", "fewer bytes per token"),
        A("tgi", "--quantize fp8|awq|gptq", "fewer bytes per token"),
        A("llamacpp", "a smaller quant type (Q8_0 → Q5_K_M → Q4_K_M)", "fewer bytes per token"),
        A("ollama", "a quantized tag (e.g. …:8b-instruct-q4_K_M instead of …-fp16)", "fewer bytes per token"),
        A("any", "serve more users at once: batching shares each weight read across sequences", "aggregate tokens/s grows with batch while single-stream speed is pinned"),
    ],
    "decode_below_ceiling": [
        A("any", "look at the serving stack before the hardware: threads, offload, kernels, other processes on the device", "the device could stream the weights faster than this"),
        A("vllm", "do not run with --enforce-eager (CUDA graphs cut per-step overhead); check --tensor-parallel-size matches the GPUs", "per-step launch overhead dominates small models"),
        A("llamacpp", "-ngl 99 (all layers on the GPU), --threads = physical cores on CPU, -fa on", "layers on the CPU or too few threads leave bandwidth unused"),
        A("ollama", "`ollama ps`: the model must be 100% GPU; otherwise lower num_ctx or use a smaller quant so it fits", "partially offloaded models decode at CPU speed"),
        A("sglang", "check --tp-size and that CUDA graphs are not disabled (--disable-cuda-graph)", "per-step overhead"),
        A("tgi", "check --num-shard and the attention backend", "per-step overhead"),
    ],
    "long_context": [
        A("any", "keep contexts short: trim or summarise conversation history", "every decode step reads the whole KV cache of the sequence"),
        A("vllm", "--kv-cache-dtype fp8", "halves KV bytes read per step and doubles the pool"),
        A("sglang", "--kv-cache-dtype fp8_e5m2", "halves KV bytes read per step"),
        A("llamacpp", "-fa on with -ctk q8_0 -ctv q8_0, and a --ctx-size no larger than needed", "flash attention plus a quantized KV cache read fewer bytes per step"),
        A("ollama", "OLLAMA_FLASH_ATTENTION=1 with OLLAMA_KV_CACHE_TYPE=q8_0; a smaller num_ctx", "quantized KV cache"),
        A("tgi", "--kv-cache-dtype fp8 (where the backend supports it)", "fewer KV bytes per step"),
    ],
    "batching_knee": [
        A("any", "cap concurrency per server near the knee and scale out beyond it", "past the knee more users add tail latency but little throughput"),
        A("vllm", "--max-num-seqs ≈ the knee", "bounds the batch so p99 ITL stays where you want it"),
        A("sglang", "--max-running-requests ≈ the knee", "bounds the batch"),
        A("tgi", "--max-concurrent-requests / --max-batch-size ≈ the knee", "bounds the batch"),
        A("llamacpp", "--parallel ≈ the knee", "slots beyond the knee mostly add latency"),
        A("ollama", "OLLAMA_NUM_PARALLEL ≈ the knee", "parallel slots beyond the knee mostly add latency"),
    ],
    "batching_no_gain": [
        A("any", "if the server has one slot or a batch size of 1, raise it; if it is compute-bound (CPU), batching cannot help — add devices", "concurrent requests were served no faster together than one at a time"),
        A("llamacpp", "--parallel N (and --ctx-size N × per-request context)", "one slot serialises requests"),
        A("ollama", "OLLAMA_NUM_PARALLEL > 1", "the default of 1 serialises requests"),
        A("vllm", "--max-num-seqs (check it is not 1)", "a batch of one serialises requests"),
        A("sglang", "--max-running-requests (check it is not 1)", "a batch of one serialises requests"),
        A("tgi", "--max-batch-size (check it is not 1)", "a batch of one serialises requests"),
    ],
    "kv_pool_full": [
        A("vllm", "--gpu-memory-utilization (raise), --kv-cache-dtype fp8, --max-model-len (lower), quantized weights", "a full pool makes new requests wait or preempts running ones"),
        A("sglang", "--mem-fraction-static (raise), --kv-cache-dtype fp8_e5m2", "a larger KV pool"),
        A("tgi", "--cuda-memory-fraction, --max-batch-total-tokens", "a larger KV budget"),
        A("llamacpp", "--ctx-size (raise; it is the whole pool, split over --parallel slots) or -ctk/-ctv q8_0", "more KV cells"),
        A("ollama", "a smaller num_ctx or OLLAMA_KV_CACHE_TYPE=q8_0", "each slot reserves num_ctx of KV"),
    ],
    "model_load": [
        A("ollama", "keep_alive: -1 (or OLLAMA_KEEP_ALIVE=30m)", "the model was loaded during a request: the default keep_alive of 5m unloads it when idle"),
        A("any", "send a warm-up request after (re)starting the server", "the first request pays for loading"),
    ],
    # speculative decoding keeps too few drafted tokens (rule ``speculation``; flags: llama-server --help at the
    # pinned build, vLLM's speculative_config, SGLang's server arguments)
    "spec_low_acceptance": [
        A("llamacpp", "--spec-type none (no speculation), or fewer drafted tokens: --spec-draft-n-max (draft model, -md) / --spec-ngram-mod-n-max (ngram-mod)", "each verified step checks every drafted token; most are rejected, so the work buys little"),
        A("llamacpp", "-md a smaller draft model of the target's own family (same tokenizer), or another --spec-type (ngram-* only pays on text that repeats the prompt)", "acceptance is how often the draft agrees with the target"),
        A("vllm", "drop --speculative-config, or a lower \"num_speculative_tokens\" in it (or another \"method\": ngram pays only on repetitive text)", "rejected drafts cost verification compute on every step"),
        A("sglang", "drop --speculative-algorithm, or fewer --speculative-num-draft-tokens / --speculative-num-steps", "rejected drafts cost verification compute on every step"),
        A("any", "speculation pays on predictable output (code edits, quoting the prompt, structured output) at low concurrency", "free-form text at high sampling temperature keeps little of the draft"),
        A("any", "measure it at your load: phasescope tune --workload bench --max-concurrency N --param spec=none,ngram (embedded engine; --serve with the engine's speculation flag as a {param} elsewhere)", "at high concurrency a step is compute-bound and verifying drafts costs more than it saves; only the same load with speculation off and on shows where"),
    ],
    # speculation past the ridge (rule ``speculation``, finding ``speculation-batch-too-large``). Flags: llama-server
    # --help at the pinned build (--spec-draft-n-max, --spec-ngram-mod-n-max, --spec-type none; the old --draft-max /
    # --draft-min are removed there); vLLM vllm/config/speculative.py (SpeculativeConfig.num_speculative_tokens_per_batch_size,
    # "(range_start, range_end, num_speculative_tokens) with an inclusive batch-size range"); SGLang
    # python/sglang/srt/server_args.py (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens)
    # speculation loses even at one stream on these roofs (the same sources as above)
    "spec_step_too_costly": [
        A("llamacpp", "--spec-type none, or fewer drafted tokens per step: --spec-draft-n-max (draft model, -md) / --spec-ngram-mod-n-max (ngram-mod), or a smaller -md draft model", "each step's drafts and their verification cost more than the accepted tokens save"),
        A("vllm", "a lower \"num_speculative_tokens\" in --speculative-config (a smaller draft \"model\"), or drop --speculative-config", "each step's drafts and their verification cost more than the accepted tokens save"),
        A("sglang", "fewer --speculative-num-draft-tokens / --speculative-num-steps, or drop --speculative-algorithm", "each step's drafts and their verification cost more than the accepted tokens save"),
        A("any", "measure it at your load: phasescope tune --workload bench --max-concurrency N --param spec=none,ngram (embedded engine; --serve with the engine's speculation flag as a {param} elsewhere)", "this is predicted from the device's roofs and the measured acceptance; the same load with speculation off and on measures it"),
    ],
    "spec_batch_too_large": [
        A("llamacpp", "--spec-type none on a server that runs this many requests at once, or fewer drafted tokens per step: --spec-draft-n-max (draft model, -md) / --spec-ngram-mod-n-max (ngram-mod)", "a verify pass past the ridge costs about (drafted + 1)× the compute of a plain step, more than the accepted tokens give back"),
        A("llamacpp", "fewer --parallel slots per server below the break-even batch, and more servers beside it", "speculation pays while each verify pass stays memory-bound"),
        A("vllm", "\"num_speculative_tokens_per_batch_size\" in --speculative-config: fewer drafted tokens from the break-even batch up (a schedule of [range_start, range_end, num_speculative_tokens], inclusive ranges), or drop --speculative-config for a high-concurrency deployment", "vLLM then drafts less exactly where the batch makes verification compute-bound"),
        A("sglang", "fewer --speculative-num-draft-tokens / --speculative-num-steps (and --speculative-eagle-topk 1), or drop --speculative-algorithm for a high-concurrency deployment; --max-running-requests below the break-even batch keeps it paying", "every draft token of every running request is verified in the same pass"),
        A("any", "measure it at your load: phasescope tune --workload bench --max-concurrency N --param spec=none,ngram (embedded engine; --serve with the engine's speculation flag as a {param} elsewhere)", "the break-even batch here is predicted from the device's roofs and the measured acceptance; the same load with speculation off and on measures it"),
    ],
    "fixed_overhead": [
        A("any", "look between the client and the engine: proxies, TLS, auth gateways, tokenization and chat templating", "this time does not grow with the prompt, so it is not prefill"),
        A("ollama", "keep_alive so the model stays loaded", "a model load shows up as a fixed TTFT cost"),
    ],
}


def advice_for(topic: str, engine: str | None) -> list[Advice]:
    """The advice for ``topic``: engine-neutral entries plus the detected engine's own; every
    engine's entries when the engine is unknown."""
    items = KNOBS[topic]
    if engine not in ENGINES:
        return list(items)
    return [a for a in items if a.engine in ("any", engine)]


# -- advice that knows the current settings ------------------------------------------------------------------
def _pow2_below(n: int, floor: int = 32) -> int:
    """The largest power of two at most n/2 (a split into at least two pieces), not below ``floor``."""
    p = 1
    while p * 2 <= max(1, n // 2):
        p *= 2
    return max(floor, p)


def _batch_split(engine: str, flag: str, cur: int | None, cur_src: str, prompt: int | None,
                 unit: str = "prompt tokens per step") -> Advice | None:
    """Advice to lower a prefill-batch limit so a ``prompt``-token prompt is split; None when no value
    would act on it (or it is already split into pieces no larger than the smallest sensible one)."""
    if prompt is None:
        return None
    if cur is not None and cur < prompt:
        new = cur // 2
        if new < 32:
            return None
        return A(engine, f"{flag} {new} (now {cur}, {cur_src})",
                 f"the {prompt}-token prompt is already split into {-(-prompt // cur)} pieces of ≤ {cur} {unit}; "
                 f"halving the piece halves how long each one stalls the running streams")
    new = _pow2_below(prompt)
    if new >= prompt:
        return None
    now = f" (now {cur}, {cur_src})" if cur is not None else ""
    why = (f"the {prompt}-token prompt fits one piece of {cur}, so it is prefilled in one step while the running "
           f"streams wait; below {prompt} it is split and the streams decode between the pieces") if cur is not None else \
        (f"a limit below the {prompt}-token prompt splits it, and the running streams decode between the pieces")
    return A(engine, f"{flag} {new}{now}", why)


def _interference(items: list[Advice], s: Any, prompt: int | None, chunked: bool | None,
                  cost: PrefillCost | None = None) -> list[Advice]:
    out: list[Advice] = []
    for a in items:
        if a.engine == "llamacpp":
            b = _batch_split("llamacpp", "-b", s.n_batch, s.src("n_batch"), prompt)
            if b is not None:
                nb = int(b.change.split()[1])
                ub = min(nb, s.n_ubatch or nb)
                now = ""
                if s.n_batch is not None:
                    now = f" (now -b {s.n_batch}" + (f" -ub {s.n_ubatch}" if s.n_ubatch else "") + f", {s.src('n_batch')})"
                price, helps = split_cost(cost, nb, s.n_batch, small_kernels=ub < (s.n_ubatch or 512))
                if not helps:
                    continue  # the step's own decode work already makes most of the stall
                moves = {"n_batch": ("lower", nb)}
                if s.n_ubatch is not None and ub < s.n_ubatch:
                    moves["n_ubatch"] = ("lower", ub)
                out.append(TunedAdvice("llamacpp", f"-b {nb} -ub {ub}{now}",
                                       b.why + " (llama-server decodes the other slots between -b pieces; -ub must not "
                                       "exceed -b)" + (". " + price if price else ""), moves=moves))
            elif prompt is None:
                out.append(a)
        elif a.engine in ("vllm", "sglang", "tgi"):
            flag = {"vllm": "--max-num-batched-tokens", "sglang": "--chunked-prefill-size",
                    "tgi": "--max-batch-prefill-tokens"}[a.engine]
            if a.engine == "vllm" and s.chunked_prefill is False:
                out.append(A("vllm", f"--enable-chunked-prefill (now off, {s.src('chunked_prefill')})",
                             "without chunked prefill a long prompt runs as one step and every running stream waits it out"))
                continue
            b = _batch_split(a.engine, flag, s.max_num_batched_tokens, s.src("max_num_batched_tokens"), prompt)
            if b is not None:
                nb = int(b.change.split()[1])
                price, helps = split_cost(cost, nb, s.max_num_batched_tokens, small_kernels=False)
                if helps:
                    out.append(TunedAdvice(a.engine, b.change, b.why + (". " + price if price else ""),
                                           moves={"max_num_batched_tokens": ("lower", nb)}))
            elif prompt is None:
                out.append(a)
        elif a.engine == "ollama":
            b = _batch_split("ollama", "num_batch", s.n_batch, s.src("n_batch"), prompt)
            if b is not None or prompt is None:
                out.append(b or a)
        else:
            out.append(a)
    return out


def _quant(items: list[Advice], s: Any) -> list[Advice]:
    from phasescope.diagnose.settings import next_smaller_quant
    from phasescope.theory.quant import bits_per_weight

    ft = s.model_file_type
    if ft is None and not s.quantization:
        return [A(a.engine, a.change.replace("a smaller quant type (Q8_0 → Q5_K_M → Q4_K_M)",
                                             "one quant type smaller than the current one (Q8_0 → Q5_K_M → Q4_K_M → Q3_K_M)"), a.why)
                for a in items]
    out: list[Advice] = []
    cur = ft or s.quantization
    try:
        cur_bits = bits_per_weight(cur)
    except Exception:  # noqa: BLE001
        cur_bits = None
    nxt = next_smaller_quant(cur) if ft else ({"fp16": "fp8", "bf16": "fp8", "fp8": "awq", "int8": "awq"}.get(cur))
    for a in items:
        if a.change.startswith("quantize the weights"):
            continue  # replaced by the step from the current type below
        if a.engine in ("llamacpp", "ollama", "vllm", "sglang", "tgi") and (
                "quant" in a.change.lower() or "q4_k_m" in a.change.lower()):
            if a.engine not in ("llamacpp", "ollama") and ft:
                continue  # a GGUF file: the GGUF ladder below applies
            if nxt is not None and cur_bits:
                nb = bits_per_weight(nxt)
                name = nxt.upper() if ft else {"awq": "an AWQ/GPTQ 4-bit checkpoint", "fp8": "--quantization fp8"}.get(nxt, nxt)
                tag = f"a …-{nxt[:2]}{nxt[2:].upper()} tag" if a.engine == "ollama" and ft else name
                out.append(A(a.engine, f"{tag} instead of {cur.upper() if ft else cur} ({s.src('model_file_type' if ft else 'quantization')})",
                             f"bandwidth model: {cur_bits:.2f} → {nb:.2f} bits per weight reads {cur_bits / nb:.2f}× fewer "
                             f"weight bytes per token, so decode gets at most {cur_bits / nb:.2f}× faster; check the quality"))
            else:
                out.append(A(a.engine, f"a smaller model ({cur.upper() if ft else cur} is already as small as a quant type sensibly goes)",
                             "fewer parameters are fewer bytes per token"))
            continue
        out.append(a)
    if not any(x.engine in ("llamacpp", "ollama") for x in out) and ft and nxt and cur_bits:
        nb = bits_per_weight(nxt)
        out.insert(0, A("any", f"{nxt.upper()} instead of {ft.upper()} ({s.src('model_file_type')})",
                        f"bandwidth model: {cur_bits:.2f} → {nb:.2f} bits per weight, at most {cur_bits / nb:.2f}× faster decode"))
    return out


def _prefill_slow(items: list[Advice], s: Any) -> list[Advice]:
    """Prompt processing advice for what the server is: a CPU server gets threads, not GPU offload; a
    GPU (or unknown) llama.cpp server gets a larger -ub quoted against the current one."""
    backend, bsrc = s.backend, s.src("backend")
    out: list[Advice] = []
    for a in items:
        if a.engine == "llamacpp":
            if backend == "cpu":
                thr = f" (now --threads {s.threads}, {s.src('threads')})" if s.threads else ""
                out.append(A("llamacpp", f"--threads = the machine's physical cores, -tb the same{thr}",
                             f"this server prefills on the CPU ({bsrc}): prompt processing is a matrix multiply on "
                             f"every core; GPU flags (-ngl, a larger -ub for GPU kernels) do nothing here"))
                continue
            ub = s.n_ubatch
            new_ub = max(1024, 2 * ub) if ub else 1024
            now_ub = f" (now -ub {ub}, {s.src('n_ubatch')})" if ub else ""
            need_b = f", and -b ≥ {new_ub}" if s.n_batch is not None and s.n_batch < new_ub else ""
            lead = "" if backend == "gpu" else "on a GPU build: "
            cpu = "" if backend == "gpu" else "; on a CPU build use --threads = physical cores instead"
            out.append(TunedAdvice("llamacpp", f"{lead}-ub {new_ub}{now_ub}{need_b}",
                                   "bigger micro-batches keep the GPU's matrix units full" + cpu,
                                   moves={"n_ubatch": ("raise", new_ub)} if ub else {}))
            parts = []
            fa = str(s.flash_attn or "").lower()
            if fa not in ("on", "1", "true"):
                parts.append("-fa on" + (f" (now {s.flash_attn}, {s.src('flash_attn')})" if s.flash_attn else ""))
            if not (s.n_gpu_layers is not None and s.n_gpu_layers >= 99):
                parts.append("-ngl 99 (all layers on the GPU" + (f"; now {s.n_gpu_layers}, {s.src('n_gpu_layers')})"
                                                                  if s.n_gpu_layers is not None else ")"))
            if parts:
                out.append(A("llamacpp", lead + ", ".join(parts), "flash attention speeds up long prompts; layers "
                             "left on the CPU make prefill compute-starved"))
        elif a.engine == "ollama" and backend == "cpu":
            out.append(A("ollama", "num_thread = the machine's physical cores",
                         f"this server prefills on the CPU ({bsrc}); GPU offload advice does not apply"))
        elif a.engine == "any" and a.change.startswith("a GPU with more compute") and backend == "cpu":
            out.append(A("any", "a GPU (this server prefills on the CPU)",
                         f"prefill is compute-bound, and a GPU has one to two orders of magnitude more FLOP/s than "
                         f"a few CPU cores ({bsrc})"))
        else:
            out.append(a)
    return out


def _decode_below(items: list[Advice], s: Any) -> list[Advice]:
    """Serving-stack advice for what the server is: a CPU server gets threads, not GPU offload."""
    backend, bsrc = s.backend, s.src("backend")
    out: list[Advice] = []
    for a in items:
        if a.engine == "llamacpp":
            thr = f" (now --threads {s.threads}, {s.src('threads')})" if s.threads else ""
            if backend == "cpu":
                out.append(A("llamacpp", f"--threads = the machine's physical cores{thr}; nothing else busy on them",
                             f"this server decodes on the CPU ({bsrc}): each step streams the weights through the "
                             f"cores' memory bandwidth, and a core lost to other work slows every step"))
                continue
            parts = []
            if not (s.n_gpu_layers is not None and s.n_gpu_layers >= 99):
                parts.append("-ngl 99 (all layers on the GPU" + (f"; now {s.n_gpu_layers}, {s.src('n_gpu_layers')})"
                                                                  if s.n_gpu_layers is not None else ")"))
            if str(s.flash_attn or "").lower() not in ("on", "1", "true"):
                parts.append("-fa on")
            if backend != "gpu":
                parts.append(f"on a CPU build --threads = physical cores{thr}")
            if parts:
                out.append(A("llamacpp", ", ".join(parts), a.why))
        elif a.engine == "ollama" and backend == "cpu":
            out.append(A("ollama", "num_thread = the machine's physical cores",
                         f"this server decodes on the CPU ({bsrc}); GPU offload advice does not apply"))
        else:
            out.append(a)
    return out


def _parallel(items: list[Advice], s: Any, topic: str, knee: int | None) -> list[Advice]:
    out: list[Advice] = []
    for a in items:
        par = a.engine in ("llamacpp", "ollama") and ("--parallel" in a.change or "NUM_PARALLEL" in a.change)
        seqs = a.engine in ("vllm", "sglang", "tgi") and ("max-num-seqs" in a.change or "max-running" in a.change
                                                          or "max-concurrent" in a.change or "max-batch-size" in a.change)
        cur, src = (s.n_parallel, s.src("n_parallel")) if par else ((s.max_num_seqs, s.src("max_num_seqs")) if seqs else (None, ""))
        if not (par or seqs) or cur is None:
            out.append(a)
            continue
        flag = a.change.split()[0]
        if topic == "batching_knee":
            if knee is None or knee == cur:
                continue  # already there
            way = "raise" if knee > cur else "lower"
            out.append(TunedAdvice(a.engine, f"{flag} {knee} (now {cur}, {src})", a.why,
                                   moves={"n_parallel" if par else "max_num_seqs": (way, knee)}))
        elif topic == "batching_no_gain":
            if cur > 1:
                continue  # slots are not what serialises the requests
            out.append(TunedAdvice(a.engine, f"{flag} 4 (now {cur}, {src})", a.why,
                                   moves={"n_parallel" if par else "max_num_seqs": ("raise", 4)}))
        elif topic == "queueing":
            ctx = f" and --ctx-size {2 * s.ctx_size}" if a.engine == "llamacpp" and s.ctx_size else ""
            out.append(TunedAdvice(a.engine, f"{flag} {2 * cur}{ctx} (now {cur}, {src})", a.why,
                                   moves={"n_parallel" if par else "max_num_seqs": ("raise", 2 * cur)}))
        else:
            out.append(a)
    return out


def tailored(topic: str, engine: str | None, settings: Any = None, *, prompt_tokens: int | None = None,
             chunked: bool | None = None, knee: int | None = None, cost: PrefillCost | None = None) -> list[Advice]:
    """:func:`advice_for`, with each change set against the server's current settings
    (:class:`phasescope.diagnose.settings.ServerSettings`): a change equal to the current value, or
    one that would not act on this workload or this backend, is left out; the rest name the current
    value, and (``cost``) what the change costs."""
    items = advice_for(topic, engine)
    if settings is None:
        from phasescope.diagnose.settings import ServerSettings

        settings = ServerSettings()
    if topic == "interference":
        return _interference(items, settings, prompt_tokens, chunked, cost)
    if topic == "prefill_slow":
        return _prefill_slow(items, settings)
    if topic == "decode_below_ceiling":
        return _decode_below(items, settings)
    if topic in ("decode_at_ceiling",):
        return _quant(items, settings)
    if topic in ("batching_knee", "batching_no_gain", "queueing"):
        return _parallel(items, settings, topic, knee)
    if topic == "prefix_cache" and settings.prefix_caching is not None:
        src = settings.src("prefix_caching")
        now = "off" if settings.prefix_caching is False else "on"
        return [A(a.engine, f"{a.change} (now {now}: {src})", a.why) if a.engine != "any" else a for a in items]
    return items
