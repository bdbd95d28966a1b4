// Reloads the page while an experiment is still active, so its state and metrics stay current.
(function () {
  var script = document.currentScript;
  var interval = parseInt(script.getAttribute("data-interval"), 10) || 3000;
  setTimeout(function () { window.location.reload(); }, interval);
})();
