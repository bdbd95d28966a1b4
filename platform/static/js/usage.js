// Draws GPU-hours and CPU-slot-hours per UTC day, which the usage pages embed with json_script.
(function () {
  var source = document.getElementById("usage-data");
  if (!source || typeof Chart === "undefined") { return; }
  var data = JSON.parse(source.textContent);

  function bars(label, values, color) {
    return { label: label, data: values, backgroundColor: color, borderColor: color, borderWidth: 1 };
  }

  new Chart(document.getElementById("usage-chart"), {
    type: "bar",
    data: {
      labels: data.days,
      datasets: [
        bars("GPU-hours", data.gpu_hours, "#ff6f00"),
        bars("CPU-slot-hours", data.cpu_slot_hours, "#2e90fa"),
      ],
    },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      // A report, not a live view: animating it only delays what the reader came to see.
      animation: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
      scales: {
        x: { ticks: { maxRotation: 0, autoSkip: true, color: "#667085" }, grid: { display: false } },
        y: {
          beginAtZero: true,
          title: { display: true, text: "hours", color: "#667085" },
          ticks: { color: "#667085" },
          grid: { color: "#e4e7ec" },
        },
      },
    },
  });
})();
