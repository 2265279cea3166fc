// The script of a run's page in a static export (rollkit.notebook.export):
// draws the run's charts (plotly.js, copied beside it) and its grid of
// rollouts, paged, sorted and filtered here, from the run's data script
// (window.RK_RUN_<k>: columns, rows, pages, charts; a comparison's page
// has its chart only, window.RK_COMPARE). It writes text only
// (textContent), never HTML made from the data, and asks nothing of the
// network.
(function () {
  "use strict";
  var PAGE = 25;
  var TITLES = {task_key: "task", ok: "ok", reward: "reward", turns: "turns", total_tokens: "tokens",
                cost_usd: "cost", stop: "stop", id: "rollout"};
  var NUMERIC = {reward: true, turns: true, total_tokens: true, cost_usd: true};

  function cell(column, value) {
    if (column === "ok") return value === true ? "ok" : value === false ? "FAIL" : "open";
    if (value === null || value === undefined) return column === "reward" || column === "cost_usd" ? "\u2013" : "";
    if (column === "reward") return value.toFixed(3);
    if (column === "cost_usd") return "$" + value.toFixed(6);
    return String(value);
  }

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  function grid(host, data, base) {
    var state = {page: 0, sort: -1, desc: false, needle: ""};
    var controls = el("div", undefined, "rk-grid-controls");
    var filter = el("input", undefined, "rk-grid-filter");
    filter.type = "search";
    filter.placeholder = "filter: any cell contains\u2026";
    var prev = el("button", "previous", "rk-grid-prev"), next = el("button", "next", "rk-grid-next");
    var status = el("span", "", "rk-grid-status");
    [filter, prev, next, status].forEach(function (n) { controls.appendChild(n); controls.appendChild(document.createTextNode(" ")); });
    var table = el("table", undefined, "rk-table rk-grid-table");
    host.appendChild(controls);
    host.appendChild(table);
    var order = data.rows.map(function (_, i) { return i; });

    function shown() {
      var needle = state.needle.toLowerCase();
      var rows = order.filter(function (i) {
        return !needle || data.rows[i].some(function (v, c) { return cell(data.columns[c], v).toLowerCase().indexOf(needle) >= 0; });
      });
      if (state.sort >= 0) {
        var c = state.sort, sign = state.desc ? -1 : 1;
        rows.sort(function (a, b) {
          var x = data.rows[a][c], y = data.rows[b][c];
          if (x === y) return a - b;
          if (x === null) return 1;
          if (y === null) return -1;
          return (x < y ? -1 : 1) * sign;
        });
      }
      return rows;
    }

    function draw() {
      var rows = shown();
      var pages = Math.max(1, Math.ceil(rows.length / PAGE));
      state.page = Math.min(state.page, pages - 1);
      table.textContent = "";
      var head = el("tr");
      data.columns.forEach(function (column, c) {
        var th = el("th", TITLES[column] + (state.sort === c ? (state.desc ? " \u25bc" : " \u25b2") : ""), NUMERIC[column] ? "rk-num" : "");
        th.addEventListener("click", function () { state.desc = state.sort === c ? !state.desc : false; state.sort = c; draw(); });
        head.appendChild(th);
      });
      table.appendChild(el("thead")).appendChild(head);
      var body = table.appendChild(el("tbody"));
      rows.slice(state.page * PAGE, (state.page + 1) * PAGE).forEach(function (i) {
        var tr = el("tr");
        tr.setAttribute("data-row", String(i));
        data.columns.forEach(function (column, c) {
          var td = el("td", undefined, NUMERIC[column] ? "rk-num" : "");
          var text = cell(column, data.rows[i][c]);
          if (column === "id") {
            var a = el("a", text, "rk-rollout-link");
            a.href = base + data.pages[i];
            td.appendChild(a);
          } else {
            td.textContent = text;
          }
          tr.appendChild(td);
        });
        body.appendChild(tr);
      });
      status.textContent = rows.length + " of " + data.rows.length + " rollouts \u00b7 page " + (state.page + 1) + " of " + pages;
      prev.disabled = state.page === 0;
      next.disabled = state.page >= pages - 1;
    }

    filter.addEventListener("input", function () { state.needle = filter.value; state.page = 0; draw(); });
    prev.addEventListener("click", function () { state.page -= 1; draw(); });
    next.addEventListener("click", function () { state.page += 1; draw(); });
    draw();
  }

  function charts(host, figures) {
    if (!host || !window.Plotly) return;
    figures.forEach(function (figure, n) {
      var div = el("div", undefined, "rk-chart rk-chart-" + n);
      host.appendChild(div);
      window.Plotly.newPlot(div, figure.data, figure.layout, {displaylogo: false, showLink: false});
    });
  }

  document.querySelectorAll("[data-rk-run]").forEach(function (host) {
    var data = window[host.getAttribute("data-rk-run")];
    if (!data) return;
    charts(document.getElementById("rk-charts"), data.charts);
    if (data.columns) grid(host, data, host.getAttribute("data-rk-base"));
  });
})();
