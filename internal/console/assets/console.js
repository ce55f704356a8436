// The console's one script: it keeps the element marked data-live up to
// date by fetching its address every two seconds (short polling) and
// putting the HTML the server rendered (and escaped) in its place. The page
// works without it; it only spares a reload.
(function () {
  "use strict";
  var el = document.querySelector("[data-live]");
  if (!el) { return; }
  var url = el.getAttribute("data-live");
  function tick() {
    if (document.hidden) { setTimeout(tick, 2000); return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.redirected || !r.ok) { throw new Error("status " + r.status); }
        return r.text();
      })
      .then(function (html) { el.innerHTML = html; el.removeAttribute("data-stale"); })
      .catch(function () { el.setAttribute("data-stale", "true"); })
      .then(function () { setTimeout(tick, 2000); });
  }
  setTimeout(tick, 2000);
})();
