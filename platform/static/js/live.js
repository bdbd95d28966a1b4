// Keeps the detail page's log tail scrolled to its newest line as htmx swaps fresh copies in.
(function () {
  function follow() {
    var logs = document.getElementById("logs");
    if (logs) { logs.scrollTop = logs.scrollHeight; }
  }
  follow();
  document.body.addEventListener("htmx:afterSettle", follow);
  document.body.addEventListener("htmx:oobAfterSwap", follow);
})();
