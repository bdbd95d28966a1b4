// Draws the cluster's utilization history, which the page embeds with json_script.
(function () {
  var source = document.getElementById("utilization-data");
  if (!source || typeof Chart === "undefined") { return; }
  var data = JSON.parse(source.textContent);
  var times = data.recorded_at.map(function (iso) { return new Date(iso); });
  // Tooltips name the exact sample; the axis only needs minutes.
  var labels = times.map(function (t) { return t.toLocaleTimeString(); });
  var ticks = times.map(function (t) {
    return t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  });

  function series(label, values, color, capacity) {
    return {
      label: label,
      data: values,
      borderColor: color,
      backgroundColor: color + "22",
      borderWidth: capacity ? 1.5 : 2,
      // Capacity is drawn dashed and unfilled so "in use" reads against it.
      borderDash: capacity ? [6, 4] : [],
      fill: !capacity,
      stepped: true,
      pointRadius: 0,
    };
  }

  function draw(canvasId, title, datasets) {
    return new Chart(document.getElementById(canvasId), {
      type: "line",
      data: { labels: labels, datasets: datasets },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        // The page is a snapshot; animating it only delays what the operator came to read.
        animation: false,
        interaction: { mode: "index", intersect: false },
        plugins: {
          title: { display: true, text: title, align: "start", color: "#1d2330", font: { size: 14 } },
          legend: { position: "bottom", labels: { boxWidth: 12 } },
        },
        scales: {
          x: {
            ticks: {
              maxTicksLimit: 7,
              maxRotation: 0,
              color: "#667085",
              callback: function (value) { return ticks[value]; },
            },
            grid: { display: false },
          },
          y: { beginAtZero: true, ticks: { precision: 0, color: "#667085" }, grid: { color: "#e4e7ec" } },
        },
      },
    });
  }

  draw("devices-chart", "Devices", [
    series("GPUs in use", data.gpus_used, "#ff6f00", false),
    series("GPUs", data.gpus_total, "#ff6f00", true),
    series("CPU slots in use", data.cpu_slots_used, "#2e90fa", false),
    series("CPU slots", data.cpu_slots_total, "#2e90fa", true),
  ]);
  draw("experiments-chart", "Experiments", [
    series("Queued", data.queued, "#667085", false),
    series("Running", data.running, "#067647", false),
  ]);
})();
