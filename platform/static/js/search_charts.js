// The search page's charts: per hyperparameter, a scatter of each trial's best value of the
// metric against the value it tried (a category axis for lists, a log axis for log ranges).
// The points come from the live fragment's JSON, so they refresh with the trials table.
(function () {
  if (typeof Chart === "undefined") { return; }
  var root = document.getElementById("search-charts");
  if (!root) { return; }
  var charts = [];

  function read() {
    var source = document.getElementById("search-chart-data");
    return source ? JSON.parse(source.textContent) : null;
  }

  function xScale(dimension) {
    var base = { title: { display: true, text: dimension.name }, ticks: { color: "#667085" }, grid: { display: false } };
    if (dimension.values) {
      return Object.assign(base, { type: "category", labels: dimension.values.map(String), offset: true });
    }
    var scale = Object.assign(base, {
      type: dimension.log ? "logarithmic" : "linear",
      suggestedMin: dimension.low, suggestedMax: dimension.high,
    });
    if (dimension.log) {
      // Powers of ten only: a log axis's own ticks (0.03, 0.07...) crowd a small chart.
      scale.ticks = Object.assign({}, base.ticks, { maxRotation: 0, callback: function (value) {
        var exponent = Math.log10(value);
        return Math.abs(exponent - Math.round(exponent)) < 1e-9 ? String(value) : "";
      } });
    }
    return scale;
  }

  function pointsOf(data, dimension, best) {
    return data.points.filter(function (p) {
      return p.value !== null && p.value !== undefined && Boolean(p.best) === best;
    }).map(function (p) {
      var x = p.params[dimension.name];
      return { x: dimension.values ? String(x) : x, y: p.value, trial: p.trial, url: p.url };
    });
  }

  function draw(canvas, data, dimension) {
    return new Chart(canvas, {
      type: "scatter",
      data: {
        datasets: [
          { label: "trial", data: pointsOf(data, dimension, false), backgroundColor: "#ff6f00aa", borderColor: "#ff6f00", pointRadius: 5, clip: 10 },
          { label: "best trial", data: pointsOf(data, dimension, true), backgroundColor: "#067647", borderColor: "#067647", pointRadius: 8, pointStyle: "rectRot", clip: 10 },
        ],
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        layout: { padding: 8 },
        plugins: {
          legend: { position: "bottom", labels: { boxWidth: 12 } },
          tooltip: { callbacks: { label: function (item) {
            var p = item.raw;
            return "trial " + p.trial + ": " + dimension.name + " " + p.x + " → " + data.metric + " " + Number(p.y).toFixed(4);
          } } },
        },
        onClick: function (event, elements, chart) {
          if (!elements.length) { return; }
          var hit = elements[0];
          window.location.href = chart.data.datasets[hit.datasetIndex].data[hit.index].url;
        },
        scales: {
          x: xScale(dimension),
          y: { grace: "5%", title: { display: true, text: data.metric }, ticks: { color: "#667085" }, grid: { color: "#e4e7ec" } },
        },
      },
    });
  }

  function refresh() {
    var data = read();
    if (!data) { return; }
    var shown = 0;
    data.dimensions.forEach(function (dimension, index) {
      var canvas = document.getElementById("search-chart-" + index);
      if (!canvas) { return; }
      if (!charts[index]) { charts[index] = draw(canvas, data, dimension); }
      var chart = charts[index];
      chart.data.datasets[0].data = pointsOf(data, dimension, false);
      chart.data.datasets[1].data = pointsOf(data, dimension, true);
      chart.update();
      shown = chart.data.datasets[0].data.length + chart.data.datasets[1].data.length;
    });
    root.classList.toggle("has-data", shown > 0);
    root.setAttribute("data-points", String(shown));
  }

  refresh();
  document.body.addEventListener("htmx:afterSettle", refresh);
})();
