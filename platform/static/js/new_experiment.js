// The launch form: proposes each model's known-good hyperparameters until the user edits them,
// and shows the upload fields only when an upload is chosen.
(function () {
  var form = document.getElementById("experiment-form");
  var source = document.getElementById("hyperparameter-defaults");
  if (!form || !source) { return; }
  var defaults = JSON.parse(source.textContent);
  var model = form.elements.model, dataset = form.elements.dataset;
  var edited = {};

  Object.keys(defaults[model.value] || {}).forEach(function (name) {
    var input = form.elements[name];
    if (input) { input.addEventListener("input", function () { edited[name] = true; }); }
  });

  function applyDefaults() {
    var values = defaults[model.value] || {};
    Object.keys(values).forEach(function (name) {
      var input = form.elements[name];
      if (input && !edited[name]) { input.value = values[name]; }
    });
  }

  function show(fieldName, visible) {
    var wrapper = document.getElementById("field-" + fieldName);
    // A field with an error stays visible so the message is never hidden.
    if (wrapper) { wrapper.hidden = !visible && !wrapper.classList.contains("has-error"); }
  }

  function toggleUploads() {
    show("model_file", model.value === "upload");
    show("dataset_file", dataset.value === "upload");
    show("label_column", dataset.value === "upload");
  }

  model.addEventListener("change", function () { applyDefaults(); toggleUploads(); });
  dataset.addEventListener("change", toggleUploads);
  toggleUploads();
})();
