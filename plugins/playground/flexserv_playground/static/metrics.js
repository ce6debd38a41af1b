// A reader of the Prometheus text exposition format, enough for a dashboard:
// samples by metric name and labels; HELP/TYPE lines and timestamps are skipped.

/** Parse exposition text into [{name, labels, value}]. */
export function parsePrometheus(text) {
  const samples = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!match) continue;
    const value = parseValue(match[4]);
    if (Number.isNaN(value)) continue;
    samples.push({ name: match[1], labels: parseLabels(match[3] || ""), value });
  }
  return samples;
}

function parseValue(text) {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return Number(text);
}

function parseLabels(text) {
  const labels = {};
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(text)) !== null) {
    labels[m[1]] = m[2].replace(/\\n/g, "\n").replace(/\\"/g, '"').replace(/\\\\/g, "\\");
  }
  return labels;
}

/** Sum of every sample of `name` (all label sets: all models), or null if absent. */
export function total(samples, name) {
  let sum = null;
  for (const s of samples) {
    if (s.name === name) sum = (sum ?? 0) + s.value;
  }
  return sum;
}

/** Mean of every sample of `name`, or null if absent (for gauges like a usage fraction). */
export function mean(samples, name) {
  const values = samples.filter((s) => s.name === name).map((s) => s.value);
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
}
