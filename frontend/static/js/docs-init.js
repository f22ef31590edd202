// Starts Swagger UI on /docs. A file rather than an inline script so the page
// keeps its strict Content-Security-Policy (scripts from this origin only).

(function start() {
  const root = document.getElementById("swagger-ui");
  if (typeof window.SwaggerUIBundle !== "function") {
    root.textContent = "The API reference viewer did not load; the raw schema is at /openapi.json.";
    return;
  }
  let csrf = null;

  // "Try it out" rides on the browser session when there is one; its unsafe
  // requests then need the session's CSRF token, which only /auth/me tells.
  async function csrfToken() {
    if (csrf !== null) return csrf;
    try {
      const response = await fetch("/api/v1/auth/me", { credentials: "same-origin" });
      csrf = response.ok ? (await response.json()).csrf_token || "" : "";
    } catch {
      csrf = "";
    }
    return csrf;
  }

  window.ui = window.SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    oauth2RedirectUrl: new URL(root.dataset.oauth2RedirectUrl, window.location.href).href,
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    // The default sends the schema to validator.swagger.io: nothing leaves the portal.
    validatorUrl: null,
    presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIBundle.SwaggerUIStandalonePreset],
    async requestInterceptor(request) {
      const method = (request.method || "GET").toUpperCase();
      const hasBearer = Object.keys(request.headers || {}).some((k) => k.toLowerCase() === "authorization");
      if (!["GET", "HEAD", "OPTIONS"].includes(method) && !hasBearer) {
        const token = await csrfToken();
        if (token) request.headers["X-CSRF-Token"] = token;
      }
      return request;
    },
  });
})();
