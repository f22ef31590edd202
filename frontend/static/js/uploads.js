// Jobs name a tenant's uploaded dataset "upload:<id>"; people know it by the
// name they gave it. Pages load the names once and write them instead.

import { api } from "./api.js";

const UPLOAD = /^upload:(\d+)$/;
let names = new Map();
let loaded = null;
let known = false;

/** Load (or, with `refresh`, reload) the caller's uploads; resolves to them. */
export function loadUploads({ refresh = false } = {}) {
  if (!loaded || refresh) {
    loaded = api("/api/v1/datasets")
      .then((list) => {
        names = new Map(list.map((d) => [d.dataset, d.name]));
        known = true;
        return list;
      })
      .catch(() => []);
  }
  return loaded;
}

export function uploadId(ref) {
  const match = UPLOAD.exec(ref || "");
  return match ? Number(match[1]) : null;
}

/** True when `ref` is an upload whose name this page has not loaded. */
export function isUnknownUpload(ref) {
  return uploadId(ref) !== null && !names.has(ref);
}

/** "flowers" for "upload:3"; built-in datasets keep their names. */
export function datasetLabel(ref) {
  const id = uploadId(ref);
  if (id === null) return ref;
  if (names.has(ref)) return names.get(ref);
  return known ? `deleted upload #${id}` : `upload #${id}`;
}

const DEFAULT_NAME = / on (upload:\d+)$/;

/**
 * A job's name with its upload named: the server names an unnamed job
 * "<algorithm> on <dataset>", which for an upload reads "... on upload:3".
 */
export function jobName(name) {
  return (name || "").replace(DEFAULT_NAME, (_, ref) => ` on ${datasetLabel(ref)}`);
}

/** True when `job.name` is only the server's default for the job. */
export function hasDefaultName(job) {
  return !job.name || job.name === `${job.algorithm} on ${job.dataset}`;
}
