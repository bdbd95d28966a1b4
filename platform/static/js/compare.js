// The compare page's bar chart of median images/sec, one bar per compared experiment.
(function () {
  var source = document.getElementById("compare-data");
  if (!source || typeof Chart === "undefined") { return; }
  var data = JSON.parse(source.textContent);
  new Chart(document.getElementById("compare-chart"), {
    type: "bar",
    data: {
      labels: data.labels,
      datasets: [{
        label: "images/sec (median epoch)", data: data.images_per_sec,
        backgroundColor: "#ff6f00cc", borderColor: "#ff6f00", borderWidth: 1, borderRadius: 4,
      }],
    },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      indexAxis: data.labels.length > 6 ? "y" : "x",
      plugins: { legend: { display: false } },
      scales: {
        x: { ticks: { color: "#667085" }, grid: { display: false } },
        y: { beginAtZero: true, ticks: { color: "#667085" }, grid: { color: "#e4e7ec" } },
      },
    },
  });
})();
