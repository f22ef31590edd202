// Sign-in page: email + password -> session cookie, then back to where the
// user was going (a same-site path only). It asks the API nothing on load: a
// browser that is still signed in never gets here (the server sends it on).

import { api, ApiError } from "../api.js";
import { $, clear, notice } from "../dom.js";

function nextPath() {
  const next = new URLSearchParams(window.location.search).get("next") || "/jobs";
  // Only paths on this site: "/x" but not "//host" or "/\host", and no control
  // characters, which browsers drop from URLs ("/\t/host" becomes "//host").
  const onSite = /^\/(?![/\\])/.test(next) && !/[\\\u0000-\u001f\u007f]/.test(next);
  return onSite && !next.startsWith("/login") ? next : "/jobs";
}

function setError(field, message) {
  const input = $(`#${field}`);
  $(`#${field}-error`).textContent = message || "";
  if (message) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
}

async function onSubmit(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const message = $("#login-message");
  const email = form.email.value.trim();
  const password = form.password.value;
  setError("email", email ? "" : "Enter your email address.");
  setError("password", password ? "" : "Enter your password.");
  if (!email || !password) {
    (email ? form.password : form.email).focus();
    return;
  }
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  clear(message, notice("loading", "Signing in…"));
  try {
    await api("/api/v1/auth/login", {
      method: "POST",
      body: { email, password },
      redirectOn401: false,
    });
    window.location.assign(nextPath());
  } catch (err) {
    const text =
      err instanceof ApiError && err.status === 401
        ? "Wrong email or password."
        : err.message || "Sign-in failed.";
    clear(message, notice("error", text));
    form.password.value = "";
    form.password.focus();
    button.disabled = false;
  }
}

const params = new URLSearchParams(window.location.search);
if (params.has("next")) {
  clear($("#login-message"), notice("info", "Sign in to continue."));
}
$("#login-form").addEventListener("submit", onSubmit);
