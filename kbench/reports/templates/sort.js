// Sortable tables: a click on a column's header sorts the rows by that column, again to reverse. Cells carry the
// value to sort by in data-v (numbers in th.num columns); rows without a value stay last either way.
function makeSortable(root) {
root.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    th.tabIndex = 0;
    function sort() {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var numeric = th.classList.contains("num");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var v = row.cells[col].getAttribute("data-v");
        if (v === null || v === "") return null;
        return numeric ? parseFloat(v) : v.toLowerCase();
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);
        var order = x < y ? -1 : x > y ? 1 : 0;
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (event) { if (event.key === "Enter") sort(); });
  });
});
}
makeSortable(document);

// A row's card opens when a link leads to it (the leaderboard's names, the box's rows): its figures are folded.
function openLinkedCard() {
  var target = location.hash && document.getElementById(location.hash.slice(1));
  var card = target && target.querySelector("details.card");
  if (card) card.open = true;
}
window.addEventListener("hashchange", openLinkedCard);

// The report's problem sections come gzipped and base64-encoded (kbench.reports.html.pack_sections): inflated into
// their place on load, made sortable, then the link the page was opened at is followed. body[data-sections] says
// when they are in ("ready"), or that this browser could not inflate them ("failed").
(function inflateSections() {
  var data = document.getElementById("problem-data");
  var into = document.getElementById("problem-sections");
  function done(state) {
    openLinkedCard();
    var target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && state === "ready") target.scrollIntoView();
    document.body.setAttribute("data-sections", state);
  }
  if (!data || !into) return done("ready");
  try {
    var text = atob(data.textContent.trim());
    var bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    new Response(stream).text().then(function (html) {
      into.innerHTML = html;
      makeSortable(into);
      done("ready");
    }, function () { failed(); });
  } catch (error) {
    failed();
  }
  function failed() {
    into.textContent = "This browser could not unpack the problems' sections (it lacks DecompressionStream): " +
      "read report.md and run.json beside this file.";
    done("failed");
  }
})();
