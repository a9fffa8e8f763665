(function () {
  var table = document.getElementById("instances");
  if (!table || !table.tHead) return;
  var heads = table.tHead.rows[0].cells;
  function sortBy(col) {
    var th = heads[col];
    var asc = th.getAttribute("aria-sort") !== "ascending";
    for (var j = 0; j < heads.length; j++) heads[j].removeAttribute("aria-sort");
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var keyed = Array.prototype.map.call(body.rows, function (row, i) {
      var cell = row.cells[col];
      var isNull = !cell || cell.classList.contains("null");
      var s = cell ? cell.textContent : "";
      var t = s.trim();
      var n = Number(t);
      return { row: row, i: i, isNull: isNull, num: (t !== "" && isFinite(n)) ? n : null, s: s };
    });
    keyed.sort(function (a, b) {
      if (a.isNull !== b.isNull) return a.isNull ? 1 : -1;
      var c = 0;
      if (a.num !== null && b.num !== null) c = a.num - b.num;
      else if (a.num !== null) c = -1;
      else if (b.num !== null) c = 1;
      else c = a.s < b.s ? -1 : (a.s > b.s ? 1 : 0);
      if (!asc) c = -c;
      return c || (a.i - b.i);
    });
    var frag = document.createDocumentFragment();
    keyed.forEach(function (k) { frag.appendChild(k.row); });
    body.appendChild(frag);
  }
  Array.prototype.forEach.call(heads, function (th, col) {
    th.tabIndex = 0;
    th.title = "Sort by " + th.textContent;
    th.addEventListener("click", function () { sortBy(col); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(col); }
    });
  });
})();
