// A job's loss points as its page holds them: the stored history, then the
// points the live stream adds (only those past the last one held), halved
// when there are too many to draw, with the range a log axis is judged by.

const MAX_CHART_POINTS = 20000;
const LOG_RATIO = 50; // max/min beyond which a log axis reads better
const LOG_MIN_POINTS = 5;

/** `history` is GET /jobs/{id}/losses: {iterations, losses}. */
export function createLossSeries(history) {
  const series = {
    xs: history.iterations.slice(),
    ys: history.losses.slice(),
    lastIteration: 0,
    min: Infinity,
    max: -Infinity,
    allPositive: true,

    /**
     * Add the points ([iteration, loss]) past the last one held. Returns
     * null if none is, else the new points as {xs, ys} and whether the
     * series was halved to make room (then draw it whole again).
     */
    add(points) {
      const fresh = points.filter(([iteration]) => iteration > series.lastIteration);
      if (!fresh.length) return null;
      const xs = fresh.map((p) => p[0]);
      const ys = fresh.map((p) => p[1]);
      series.xs.push(...xs);
      series.ys.push(...ys);
      series.lastIteration = xs[xs.length - 1];
      track(ys);
      const decimated = series.xs.length > MAX_CHART_POINTS;
      if (decimated) decimate();
      return { xs, ys, decimated };
    },

    /** Log when every loss is positive and they span more than LOG_RATIO. */
    wantsLog() {
      return series.allPositive && series.xs.length >= LOG_MIN_POINTS && series.min > 0
        && series.max / series.min > LOG_RATIO;
    },
  };

  function track(ys) {
    for (const y of ys) {
      if (!Number.isFinite(y)) continue;
      if (y <= 0) series.allPositive = false;
      if (y < series.min) series.min = y;
      if (y > series.max) series.max = y;
    }
  }

  // Halve the stored points, keeping each pair's lower loss (the curve's shape
  // and its best values survive); the newest point is always kept.
  function decimate() {
    const xs = [];
    const ys = [];
    const n = series.xs.length - 1;
    for (let i = 0; i < n; i += 2) {
      const j = i + 1 < n && series.ys[i + 1] < series.ys[i] ? i + 1 : i;
      xs.push(series.xs[j]);
      ys.push(series.ys[j]);
    }
    xs.push(series.xs[n]);
    ys.push(series.ys[n]);
    series.xs = xs;
    series.ys = ys;
  }

  series.lastIteration = series.xs.length ? series.xs[series.xs.length - 1] : 0;
  track(series.ys);
  return series;
}
