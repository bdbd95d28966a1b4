// The new-search form: adds rows to the space table (Django's formset, whose row count the
// management form carries), dims the inputs a row's kind does not use, and shows the
// adaptive searcher's settings only when it is chosen.
(function () {
  var form = document.getElementById("search-form");
  if (!form) { return; }
  var rows = document.getElementById("space-rows");
  var template = document.getElementById("space-row-template");
  var total = form.elements["space-TOTAL_FORMS"];
  var maxRows = Number(form.elements["space-MAX_NUM_FORMS"].value);
  var add = document.getElementById("space-add");

  function kindApply(row) {
    var kind = row.querySelector(".space-kind select").value;
    row.setAttribute("data-kind", kind);
    ["values", "low", "high", "step", "log"].forEach(function (name) {
      var input = row.querySelector(".space-" + name + " input");
      var used = name === "values" ? kind === "choice" : kind !== "choice" && (name !== "step" || kind === "int");
      // Dimmed, not disabled: a value typed before switching kinds is kept, and still sent.
      input.closest("td").classList.toggle("unused", !used);
    });
  }

  function rowWire(row) {
    kindApply(row);
    row.querySelector(".space-kind select").addEventListener("change", function () { kindApply(row); });
  }

  add.addEventListener("click", function () {
    var index = Number(total.value);
    if (index >= maxRows) { return; }
    var holder = document.createElement("tbody");
    holder.innerHTML = template.innerHTML.replace(/__prefix__/g, String(index));
    var row = holder.querySelector(".space-row");
    rows.appendChild(row);
    total.value = String(index + 1);
    rowWire(row);
    row.querySelector("input").focus();
    add.hidden = index + 1 >= maxRows;
  });

  var searcher = form.elements.searcher;
  var adaptive = document.getElementById("adaptive-fields");
  function searcherApply() {
    adaptive.hidden = searcher.value !== "adaptive" && !adaptive.querySelector(".has-error");
  }
  searcher.addEventListener("change", searcherApply);
  searcherApply();
  rows.querySelectorAll(".space-row").forEach(rowWire);
})();
