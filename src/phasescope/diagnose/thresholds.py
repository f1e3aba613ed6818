"""Every threshold the diagnosis rules decide by, with what it means (one place to read and tune them)."""

#: decode at ≥ this share of the bandwidth ceiling: only fewer bytes or faster memory help (seed)
CEILING_AT = 0.80
#: decode below this share: the serving stack leaves bandwidth unused
CEILING_FAR_BELOW = 0.50
#: context-fill slowdown (%) from which the long-context penalty is a problem rather than a note
LONG_CONTEXT_PROBLEM_PCT = 25.0
#: measured/predicted slowdown above which attention reads cost more than the bandwidth model says
LONG_CONTEXT_WORSE_THAN_MODEL_X = 2.0
#: fixed TTFT overhead that is worth a finding: absolute and as a share of the shortest prompt's TTFT
OVERHEAD_MIN_S = 0.1
OVERHEAD_MIN_SHARE = 0.5
#: share of TTFT spent outside prefill at the top batching level that means "queueing dominates"
QUEUE_DOMINATES = 0.5
#: a higher level with less than 1/this of level 1's throughput is noise, not "no gain"
NO_GAIN_FLOOR_X = 1.3
#: p99 ITL growth (top level / level 1) worth naming as a tail-latency cost of batching
TAIL_GROWTH_X = 2.0
#: below this R² the prompt-scaling fit's quadratic share is noise, not attention
FIT_R2_FOR_SHAPE = 0.8
#: two measurements of single-stream decode must agree within this factor for a ceiling verdict
DECODE_SOURCES_AGREE_X = 1.5
#: a model load during a request above this many seconds is worth a finding
MODEL_LOAD_MIN_S = 0.5
#: decode slowdown (%) over a conversation worth a finding (experiment ``conversation``)
CONVERSATION_DECODE_MIN_PCT = 10.0
#: the batching knee: the lowest level no higher one beats by this factor per doubling of concurrency
#: (experiment ``batching`` finds the knee by it, the rule gates its verdict on it)
KNEE_GAIN = 1.15
#: a prefill stall is claimed when the longest gap stands this many usual gaps above the whole interval
#: (experiment ``prefill-interference`` and its rule)
SPIKE_MIN_X = 3.0
#: speculative decoding pays only while enough drafted tokens survive verification. At acceptance α with k tokens
#: drafted per step, a step emits (1 − α^(k+1)) / (1 − α) tokens on average; with k = 4 and a draft that costs a
#: tenth of a target step (step 1 + 0.1·k = 1.4× as long), α = 0.3 gives 1.42 tokens per 1.4× step: break-even.
#: Below it the verification and the draft cost more than the accepted tokens save (rule ``speculation``)
SPEC_ACCEPT_LOW = 0.30
#: requests with the server's draft counts needed before the speculation rule decides (fewer: "cannot tell")
SPEC_MIN_REQUESTS = 3
