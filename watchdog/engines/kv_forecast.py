"""The KV exhaustion forecast as recording rules and its alert: the last part of the ``engines`` group.

How long until the paged KV pool can no longer hold the requests in flight (the engine's first
preemption), per engine, from the trend of in-flight requests, the arrival rate and the drift of the P90
request length; ``EngineKvExhaustionPredicted`` below the horizon. Formulas, windows and the lead times
measured on the demo scenarios: docs/forecast.md.

The rules live in the ``engines`` group of ``rules/engines.yaml`` (rendered by
:mod:`watchdog.engines.canonical`), after the canonical series they read: Prometheus evaluates the rules
of one group in order at one timestamp, so the forecast sees this evaluation's inputs, as our evaluator
does; in a group of its own it would read the previous evaluation's, and a marginal forecast would fire
in one and not the other. Pure data.
"""

from __future__ import annotations

from typing import Any

SCHED = "sum without (model_name, engine_type, tp_rank, pp_rank, moe_ep_rank, dp_rank, pid)"
ON = "on (job, instance, engine)"
# |r| of value and time a driver needs to count as a trend (r^2 >= 0.72), and how many samples.
MIN_CORRELATION = 0.85
MIN_SAMPLES = 10
# The surge test (see surge_driver): its windows (the shortest that holds SURGE_MIN_SAMPLES samples
# counts, so it follows the engine scrape interval: 6 s at 1 s scrapes, 30 s at 5 s), samples in it, and
# the rise over its minimum.
SURGE_WINDOWS = ("6s", "30s")
SURGE_MIN_SAMPLES = 5
SURGE_MIN_RISE = 1.25
# ... and a rise over that minimum of more than this many standard deviations of a Poisson count at it
# (sqrt of the minimum, at least 1): small counts jitter by more than 25 %.
SURGE_MIN_SIGMAS = 3
# A trend must hold in both halves of its window: each half's slope at least this share of the whole's, and at
# most its inverse (a line: 1 in both halves).
HALF_SLOPE_SHARE = 0.5
# The capacity branch (see demand_rules): requests in flight at least this many times their 5-minute
# average (a jump), and at the recent mean request length more than the pool holds.
JUMP_FACTOR = 2
# ...or, after such a jump, a pool already this full with requests waiting: no request length is needed to
# see that it cannot hold them (an agent that has seen no long request yet knows no length worth the name).
FULL_RATIO = 0.92
# Hysteresis of the alert (one episode, one alert): it enters where the ETA is under the horizon, and stays
# while an ETA under the horizon was seen within STAY_WINDOW and the pool's peak over PEAK_WINDOW is at least
# LEAVE_USAGE: the episode lasts while the pool is (nearly) full, whether or not each scrape shows a fresh
# forecast; held KEEP_FIRING_FOR more after both lapse. The ETA itself comes and goes within a burst (the
# capacity branch needs KV usage above its minute's minimum, which a gauge swinging 0.6-1.0 under preemption
# is one scrape in two; the trends need their fits), and the alert followed it: fired and resolved two or
# three times within one burst on a real vLLM.
STAY_WINDOW = "2m"
PEAK_WINDOW = "30s"
LEAVE_USAGE = 0.8
KEEP_FIRING_FOR = "30s"
HORIZON = "on () group_left () (max(engine:kv_exhaustion_horizon_seconds) or vector(600))"


def _straight(series: str, window: str) -> list[str]:
    """Lines of a PromQL filter: a straight line explains most of the spread of ``series`` over ``window``
    (correlation of value and time ``|r| = |slope| * stddev(time) / stddev(value) >= MIN_CORRELATION``)."""
    return [f"abs(deriv({series}[{window}])) * {ON} stddev_over_time({series}:timestamp_seconds[{window}])",
            f">= {ON} {MIN_CORRELATION} * stddev_over_time({series}[{window}])"]


def trend_driver(series: str, level_floor: str, driver: str, min_span_seconds: int = 0) -> dict[str, Any]:
    """One driver's relative growth per second: the least-squares slope of ``series`` over 5 minutes
    divided by its current level (at least ``level_floor``), kept only where it is a trend, not noise:
    :data:`MIN_SAMPLES` or more samples, and a straight line explains most of their spread (correlation
    of value and time ``|r| = |slope| * stddev(time) / stddev(value) >= MIN_CORRELATION``). A series that is
    itself a window (neighbouring samples correlated, so a random wander looks straight for a while) also
    needs ``min_span_seconds`` of samples. Needs ``<series>:timestamp_seconds`` recorded before it.

    A step is not a trend: a level that jumped once (idle to steady load) in the middle of the window has
    a correlation of up to 0.87 with time (``sqrt(3 p (1 - p))`` for a step at fraction ``p``), enough to pass
    the test above. A line rises at the same rate in both halves of its window; a step lies flat in one and
    rises steeply in the other. So the slope of each half must lie between :data:`HALF_SLOPE_SHARE` and
    ``1 / HALF_SLOPE_SHARE`` times the whole window's, and the earlier half must hold ``MIN_SAMPLES // 2``
    samples: an agent started less than 2.5 minutes ago sees no trend (a step in its short history passes
    the correlation test, and a 1-minute window filling after a step from idle is a 1-minute ramp: in lane
    run8 a trend fired 50 s into the varied-prefix phase, 2 minutes after the agent started, ETA 33 s, with
    the in-flight count flat at 2 clients). The upper bound matters where the flat half is not flat: in
    lane run13 (1 s scrapes) the earlier half held the ramp from idle to the steady load (the arrivals'
    1-minute window filling: 0 to 24 requests/s), the later half a mild rise (24 to 30/s), whose slope
    (0.06/s²) passed as 0.58 of the whole window's (0.10/s², 0.37/s² in the earlier half), and the
    forecast extrapolated the whole window's growth, mostly the step's. Young agents and steps have the
    surge and capacity tests."""
    times = f"{series}:timestamp_seconds"
    whole = f"deriv({series}[5m])"
    parts = [
        f"{whole} / {level_floor}",
        f"and {ON}",
        *_straight(series, "5m"),
        f"and {ON} count_over_time({series}[5m]) >= {MIN_SAMPLES}",
    ]
    if min_span_seconds:
        parts += [f"and {ON}",
                  f"max_over_time({times}[5m]) - min_over_time({times}[5m]) >= {min_span_seconds}"]
    parts += [f"and {ON} count_over_time({series}[2m30s] offset 2m30s) >= {MIN_SAMPLES // 2}",
              *(f"unless {ON} deriv({series}[2m30s]{offset}) / {ON} {whole} {op} {bound:g}"
                for offset in ("", " offset 2m30s")
                for op, bound in (("<", HALF_SLOPE_SHARE), (">", 1 / HALF_SLOPE_SHARE)))]
    return {"record": "engine:kv_demand_growth_ratio:deriv5m", "expr": "\n".join(parts),
            "labels": {"driver": driver}}


def surge_driver(window: str, shorter: str | None) -> dict[str, Any]:
    """Requests in flight surging: the relative slope over ``window``, where that window holds
    :data:`SURGE_MIN_SAMPLES` or more samples on a straight line (as :func:`trend_driver`) and the count
    rose by :data:`SURGE_MIN_RISE` or more over its minimum in the window, and by more than :data:`SURGE_MIN_SIGMAS`
    Poisson standard deviations at that minimum (two clients in a closed loop plus a canary probe jitter
    between 0 and 3 in flight, 25 % and more along a line within 30 s, and fired the forecast in the real
    engine lane's steady phase; 24 in flight must rise by 15). A burst of long requests fills
    the pool in seconds; over 5 minutes of steady history its first seconds explain too little of the
    spread to count as a trend, so the 5-minute test alone warns after the first preemption. Jitter does
    not rise 25 % along a line, and traffic that follows the day rises by about 1 % a minute.

    One rule per window of :data:`SURGE_WINDOWS`; a window counts only where the ``shorter`` one before it
    holds too few samples, so the test always reads the last 5-9 scrapes: 6 s at 1 s engine scrapes, 30 s
    at the default 5 s (the rules cannot know the configured interval; the samples tell). At 15 s scrapes
    both are silent and the 5-minute drivers remain."""
    series = "engine:requests_in_flight"
    parts = [
        f"deriv({series}[{window}]) / clamp_min({series}, 1)",
        f"and {ON}",
        *_straight(series, window),
        f"and {ON} count_over_time({series}[{window}]) >= {SURGE_MIN_SAMPLES}",
        f"and {ON} {series} >= {ON} {SURGE_MIN_RISE} * clamp_min(min_over_time({series}[{window}]), 1)",
        f"and {ON} {series} - {ON} min_over_time({series}[{window}])",
        f"  > {ON} {SURGE_MIN_SIGMAS} * sqrt(clamp_min(min_over_time({series}[{window}]), 1))",
    ]
    if shorter:
        parts.append(f"unless {ON} count_over_time({series}[{shorter}]) >= {SURGE_MIN_SAMPLES}")
    return {"record": "engine:kv_demand_growth_ratio:surge", "expr": "\n".join(parts),
            "labels": {"driver": "in_flight_surge", "window": window}}


def demand_rules() -> list[dict[str, Any]]:
    """The capacity branch: a step of load that the pool cannot hold, which no trend sees in time.

    ``engine:kv_demand_capacity_ratio``: the requests in flight (running + waiting) at the recent mean
    request length (prompt + generation, ``engine:request_tokens:mean5m``, i.e. over the pool's B_max
    ``engine:kv_cache_max_concurrency``) against the pool. The mean, not the P90: the tokens of n requests
    add up to about n times the mean, while n times the P90 overstates them twice over on log-normal traffic
    (and more after the 1-2-5 buckets' rounding), and would call a steady peak unholdable. Absent where no
    request finished in 5 minutes (no length known: nothing is claimed).

    ``engine:requests_in_flight:jump``: requests in flight at least :data:`JUMP_FACTOR` times their 5-minute
    average (at least 1): a step (16 clients starting at once), which one or two scrapes show but no slope
    can yet call a trend. Poisson jitter of a steady load does not double its mean (P < 0.3 % at 10 in
    flight), and neither does a day's rise. A load that stepped up and stays counts for about 2 minutes,
    until the average catches up: by then a pool that could not hold it has preempted, and EngineKvCacheNearFull
    and EnginePreemptionStorm speak. The forecast reads both: demand above the pool after a jump is
    exhaustion now (ETA 0)."""
    in_flight = "engine:requests_in_flight"
    return [
        {"record": "engine:kv_demand_capacity_ratio",
         "expr": (f"{in_flight}\n/ {ON} group_left ()\n"
                  "  max by (job, instance, engine) (engine:kv_cache_max_concurrency > 0)")},
        {"record": "engine:requests_in_flight:jump",
         "expr": f"{in_flight} >= {JUMP_FACTOR} * clamp_min(avg_over_time({in_flight}[5m]), 1)"},
    ]


def forecast_rules() -> list[dict[str, Any]]:
    """The forecast's recording rules and ``EngineKvExhaustionPredicted``, in evaluation order."""
    bucket_p90 = "histogram_quantile(0.9, {sched} (rate(engine:request_{kind}_tokens_bucket[1m])))"
    return [
        # The arrivals driver's series: requests in flight by Little's law over the last minute, L = λW, the
        # arrival rate (measured at completion: engines export no arrival counter; in steady state the two
        # are equal, and a growing arrival rate shows here one request latency later) times the mean time a
        # request stays: the seconds of latency completed per second, the slope of the E2E latency sum. KV
        # demand is the requests held, not the requests per second: a completion rate that rises because each
        # request is served faster (the engine got its cores back; a closed loop of clients then sends more)
        # holds no more requests. Lane run13 (1 s scrapes): completions rose 24 -> 30/s in 2.5 minutes
        # (0.24 %/s) while the requests in flight fell (-0.4 +- 0.2 %/s) and KV usage held; the completion
        # rate's trend fired the forecast (ETA 71-107 s), no preemption followed. Arrivals that rise at a steady
        # latency raise L as much as the rate. The least-squares slope of the counter, not rate(): rate() over a
        # window still filling (agent or engine just started) ramps up for a whole window and would read as
        # growing traffic. A counter reset reads as 0 here.
        {"record": "engine:requests_in_flight:littles_law_1m",
         "expr": f"{SCHED} (clamp_min(deriv(engine:e2e_latency_seconds_sum[1m]), 0))"},
        # P90 tokens per request (prompt P90 + generation P90: an upper bound of the P90 of their sum), from
        # the token histograms, not the mean: a few long requests fill the pool long before the mean moves.
        # Only from 30 or more requests in the window: the P90 of fewer jumps between bucket boundaries.
        {"record": "engine:request_tokens:p90_1m",
         "expr": ("(\n  " + bucket_p90.format(sched=SCHED, kind="prompt")
                  + "\n  + " + bucket_p90.format(sched=SCHED, kind="generation")
                  + f"\n  > 0\n)\nand {SCHED} (increase(engine:request_prompt_tokens_count[1m])) >= 30")},
        # Each driver's sample times, for the trend test (the standard deviation of the times).
        *({"record": f"{series}:timestamp_seconds", "expr": f"timestamp({series})"}
          for series in ("engine:requests_in_flight", "engine:requests_in_flight:littles_law_1m",
                         "engine:request_tokens:p90_1m")),
        # Relative growth per second of each driver of KV demand. Arrivals and P90 length are 1-minute
        # windows: they count only over 2 minutes or more of samples.
        trend_driver("engine:requests_in_flight", "clamp_min(engine:requests_in_flight, 1)", "in_flight"),
        trend_driver("engine:requests_in_flight:littles_law_1m",
                     "clamp_min(engine:requests_in_flight:littles_law_1m, 1)", "arrivals", 120),
        trend_driver("engine:request_tokens:p90_1m", "engine:request_tokens:p90_1m", "p90_length", 120),
        *(surge_driver(window, shorter)
          for window, shorter in zip(SURGE_WINDOWS, (None, *SURGE_WINDOWS[:-1]), strict=True)),
        *demand_rules(),
        # KV demand ~ requests in flight x tokens per request, so its relative growth is the sum of the two
        # relative growths. The requests in flight count twice: as sampled (in_flight) and by Little's law over
        # a minute (arrivals: every request that completed, so a slow rise that the samples' jitter hides
        # shows there); the larger of the two counts (or the surge, if larger). A driver without a trend (or
        # without data: no token histograms) adds 0.
        {"record": "engine:kv_demand_growth_ratio",
         "expr": ("sum without (driver) (\n"
                  "  max without (driver, window) (\n"
                  '    engine:kv_demand_growth_ratio:deriv5m{driver=~"in_flight|arrivals"}\n'
                  "    or engine:kv_demand_growth_ratio:surge\n  )\n"
                  '  or engine:kv_demand_growth_ratio:deriv5m{driver="p90_length"}\n)')},
        # Seconds until KV usage reaches 100 % if demand keeps growing linearly at the current relative rate:
        # usage(t) = u (1 + g t) = 1  =>  t = (1 - u) / (u g); 0 once the pool is full. Present only while
        # demand grows and the pool is actually filling (KV usage rose over the last minute: a queue growing
        # behind a stalled engine or behind the max_num_seqs cap is not KV demand). And 0 where the requests in
        # flight jumped beyond what the pool holds at the recent mean length (demand_rules: the pool already
        # cannot hold them), or jumped into a pool already 92 % full with requests waiting, while KV usage is
        # above its minimum of the last minute (the engine admits them; the slope of a minute that held a
        # busier period before a short lull may still point down).
        # group_left keeps every label of the usage series: a one-to-one `* on (...)` keeps only the `on`
        # labels, and the division would then match nothing where a Prometheus adds target labels (`node`).
        {"record": "engine:kv_exhaustion_eta_seconds",
         "expr": ("0 * engine:kv_cache_usage_ratio:max\n"
                  f"  and {ON} (\n"
                  "    engine:kv_demand_capacity_ratio > 1\n"
                  f"    or engine:kv_cache_usage_ratio:max >= {FULL_RATIO}\n"
                  f"      and {ON} max by (job, instance, engine) (engine:requests_waiting) >= 1\n"
                  "  )\n"
                  f"  and {ON} engine:requests_in_flight:jump\n"
                  "  and engine:kv_cache_usage_ratio:max > min_over_time(engine:kv_cache_usage_ratio:max[1m])\n"
                  "or\nclamp_min(\n  (1 - engine:kv_cache_usage_ratio:max)\n"
                  f"  / (engine:kv_cache_usage_ratio:max * {ON} group_left () (engine:kv_demand_growth_ratio > 0)),"
                  "\n  0\n)\n"
                  f"  and {ON} deriv(engine:kv_cache_usage_ratio:max[1m]) > 0")},
        # The horizon is engine:kv_exhaustion_horizon_seconds where the config sets
        # forecast.kv_exhaustion_horizon_seconds (a generated rule, `rules render` shows it), else 600 s.
        # Enter below the horizon; stay while the episode lasts (see STAY_WINDOW).
        {"alert": "EngineKvExhaustionPredicted",
         "expr": (f"engine:kv_exhaustion_eta_seconds\n< {HORIZON}\nor (\n"
                  f"  min_over_time(engine:kv_exhaustion_eta_seconds[{STAY_WINDOW}])\n  < {HORIZON}\n"
                  f"  and {ON} max_over_time(engine:kv_cache_usage_ratio:max[{PEAK_WINDOW}]) >= {LEAVE_USAGE}\n)"),
         "keep_firing_for": KEEP_FIRING_FOR,
         "labels": {"severity": "warning"},
         "annotations": {
             "summary": ("KV cache of {{ $labels.job }} predicted to run out "
                         "{{ if lt $value 1.0 }}now{{ else }}in {{ $value | humanizeDuration }}{{ end }}"),
             "description": (
                 "At the current growth of requests in flight, arrival rate and P90 request length, or because the "
                 "requests in flight jumped beyond what it holds (at the recent mean request length, or into a "
                 "pool already 92 % full with requests waiting: then now), the "
                 "paged KV pool of {{ $labels.job }} ({{ $labels.instance }}) is predicted to be full "
                 "{{ if lt $value 1.0 }}now{{ else }}in {{ $value | humanizeDuration }}{{ end }}; "
                 "then the scheduler preempts running requests and TTFT "
                 "explodes. Shed or reroute long-context traffic now, before the first preemption."),
             "runbook": "engine-kv-exhaustion-predicted"}},
    ]
