// Ticks the "queued / running for" timers the server renders; htmx may swap in new ones anytime.
// Each timer carries its start and the server's clock at render time (epoch ms), so a browser
// clock that is off does not skew it: elapsed = server-side age + time since the page saw it.
(function () {
  var firstSeen = new WeakMap();

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // Same shapes as the server's `duration` filter: 12s, 3m 05s, 2h 04m.
  function format(seconds) {
    var total = Math.max(0, Math.floor(seconds));
    var hours = Math.floor(total / 3600), minutes = Math.floor((total % 3600) / 60);
    if (hours) { return hours + "h " + pad(minutes) + "m"; }
    if (minutes) { return minutes + "m " + pad(total % 60) + "s"; }
    return total + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll(".timer[data-since]").forEach(function (timer) {
      if (!firstSeen.has(timer)) { firstSeen.set(timer, now); }
      var age = Number(timer.dataset.now) - Number(timer.dataset.since);
      timer.textContent = format((age + now - firstSeen.get(timer)) / 1000);
    });
  }

  tick();
  setInterval(tick, 1000);
})();
