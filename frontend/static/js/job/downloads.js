// A job's downloads: its history (the loss and every metric, as CSV or JSON)
// and its trained model (the checkpoint, in its trainer's format). Each
// says how it went through `say(kind, ...text)`, the page's message line.

import { fetchFile } from "../api.js";
import { download, formatNumber, h } from "../dom.js";

const DOWNLOAD_POINTS = 100000;

// What each X-Model-Format of the checkpoint download is (docs/models.md).
const MODEL_FORMATS = {
  npz: "a numpy .npz archive of the model's arrays; np.load(path, allow_pickle=False) reads it.",
  torch: "a PyTorch file; torch.load(path, weights_only=True) reads it (the model's state_dict is under \"model\").",
  bytes: "the bytes this job's trainer wrote with its state(); its restore() reads them.",
};

// The server joins the loss and every metric into one table: a row per
// iteration, a column per metric (val_* empty between evaluations).
// `current()` is the job as the page last heard of it.
export async function downloadHistory(jobId, kind, { current, say }) {
  try {
    const { blob, filename } = await fetchFile(`/api/v1/jobs/${jobId}/export?format=${kind}&max_points=${DOWNLOAD_POINTS}`, `job-${jobId}-losses.${kind}`);
    download(filename, blob);
  } catch (err) {
    say("error", `Could not download the history: ${err.message}`);
    return;
  }
  const job = current();
  if (job.iterations_done > DOWNLOAD_POINTS) {
    say("info", `The job has ${formatNumber(job.iterations_done)} iterations; the download holds a downsample of at most ${formatNumber(DOWNLOAD_POINTS)} points per metric.`);
  }
}

export async function downloadModel(jobId, { say }) {
  try {
    const { blob, filename, headers } = await fetchFile(`/api/v1/jobs/${jobId}/checkpoint`, `job-${jobId}-model.bin`);
    download(filename, blob);
    const how = MODEL_FORMATS[headers.get("X-Model-Format")] || MODEL_FORMATS.bytes;
    say("success", `Downloaded ${filename}: ${how} `, h("a", { href: "/help/models" }, "How to load it"));
  } catch (err) {
    say("error", `Could not download the model: ${err.message}`);
  }
}
