// The portal's one script of its own: keep a followed log scrolled to its end (unless
// the reader scrolled up to look at something). Everything else is htmx attributes.
(function () {
  "use strict";
  function stick(log) {
    var atEnd = true;
    log.addEventListener("scroll", function () {
      atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
    });
    new MutationObserver(function () {
      if (atEnd) { log.scrollTop = log.scrollHeight; }
    }).observe(log, { childList: true });
  }
  function scan(root) {
    var found = (root.querySelectorAll ? root.querySelectorAll("pre.log") : []);
    for (var i = 0; i < found.length; i++) {
      if (!found[i].dataset.stuck) { found[i].dataset.stuck = "1"; stick(found[i]); }
    }
  }
  document.addEventListener("DOMContentLoaded", function () { scan(document); });
  document.addEventListener("htmx:afterSettle", function (e) { scan(e.target); });
})();
