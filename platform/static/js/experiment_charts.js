// Live charts of one experiment: polls the page's JSON for metric points newer than the last
// it saw and appends them, until the experiment has finished and nothing new arrives.
(function () {
  var root = document.getElementById("charts");
  if (!root || typeof Chart === "undefined") { return; }
  var url = root.getAttribute("data-url");
  var planned = Number(root.getAttribute("data-epochs")) || undefined;
  var target = root.hasAttribute("data-target") ? Number(root.getAttribute("data-target")) : null;
  var POLL_MS = 2000;
  var cursor = 0;

  function series(label, color, options) {
    return Object.assign({
      label: label, data: [], borderColor: color, backgroundColor: color,
      borderWidth: 2, pointRadius: 3, tension: 0.2,
    }, options || {});
  }

  function draw(canvasId, datasets, xTitle, yOptions) {
    var canvas = document.getElementById(canvasId);
    return new Chart(canvas, {
      type: "line",
      data: { datasets: datasets },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: { duration: 250 },
        interaction: { mode: "nearest", axis: "x", intersect: false },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
        scales: {
          x: Object.assign({ type: "linear", title: { display: true, text: xTitle },
                             ticks: { color: "#667085" }, grid: { display: false } },
                           xTitle === "epoch" ? { min: 1, suggestedMax: planned, ticks: { precision: 0, color: "#667085" } } : { min: 0 }),
          y: Object.assign({ ticks: { color: "#667085" }, grid: { color: "#e4e7ec" } }, yOptions || {}),
        },
      },
    });
  }

  var loss = draw("loss-chart", [
    series("loss", "#ff6f00"),
    series("val_loss", "#2e90fa", { borderDash: [6, 4] }),
  ], "epoch", { beginAtZero: true });
  var accuracyDatasets = [
    series("accuracy", "#ff6f00"),
    series("val_accuracy", "#2e90fa", { borderDash: [6, 4] }),
  ];
  if (target !== null) {
    accuracyDatasets.push(series("target", "#067647", {
      data: [{ x: 1, y: target }, { x: planned || 1, y: target }],
      borderDash: [2, 3], borderWidth: 1.5, pointRadius: 0,
    }));
  }
  var accuracy = draw("accuracy-chart", accuracyDatasets, "epoch", { suggestedMin: 0, suggestedMax: 1 });
  var throughput = draw("throughput-chart", [
    series("sampled during epochs", "#98a2b3", { pointRadius: 1.5, borderWidth: 1.5 }),
    series("epoch average", "#ff6f00", { showLine: false, pointRadius: 5 }),
  ], "seconds since start", { beginAtZero: true });

  var byName = {
    loss: loss.data.datasets[0], val_loss: loss.data.datasets[1],
    accuracy: accuracy.data.datasets[0], val_accuracy: accuracy.data.datasets[1],
  };

  // An epoch seen twice (a trial that resumed from a checkpoint) keeps its newest value.
  function putEpoch(dataset, x, y) {
    for (var i = dataset.data.length - 1; i >= 0; i--) {
      if (dataset.data[i].x === x) { dataset.data[i].y = y; return; }
    }
    dataset.data.push({ x: x, y: y });
    dataset.data.sort(function (a, b) { return a.x - b.x; });
  }

  function append(points) {
    var added = 0;
    Object.keys(points.epochs).forEach(function (name) {
      var dataset = byName[name];
      if (!dataset) { return; }
      points.epochs[name].forEach(function (p) { putEpoch(dataset, p[0], p[1]); added++; });
    });
    [[points.images_per_sec, throughput.data.datasets[0]],
     [points.images_per_sec_epoch, throughput.data.datasets[1]]].forEach(function (pair) {
      pair[0].forEach(function (p) { pair[1].data.push({ x: p[0], y: p[1] }); added++; });
    });
    if (added) {
      root.classList.add("has-data");
      loss.update(); accuracy.update(); throughput.update();
    }
    return added;
  }

  function poll() {
    fetch(url + "?after=" + cursor, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (points) {
        cursor = points.cursor;
        var added = append(points);
        root.setAttribute("data-state", points.state);
        if (points.more) { poll(); }
        else if (!points.finished || added) { setTimeout(poll, POLL_MS); }
        else { root.setAttribute("data-complete", "true"); }
      })
      .catch(function () { setTimeout(poll, POLL_MS * 2); });
  }

  poll();
})();
