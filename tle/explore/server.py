"""`tle explore`'s server: the page of one kernel on 127.0.0.1, its text editable, "lower" re-running the lowering.

Safe by default: it listens on loopback only; every request carries the random token of the URL printed at start
(in the query, or the X-Tle-Token header) and names this host in its Host header (a page of another site cannot
reach it through a DNS name of its own); it reads, lowers, runs and saves only the file it was started on (and the
user's edits of it), and writes that file only when the page's "save" asks. A request it refuses gets a status and
one line saying why, and the server goes on serving.

    GET  /?token=T            the page
    GET  /source?path=P       the file's text on disk (P: the file's path or name; any other path is refused)
    POST /lower   {text, stages?, overrides?}   the panes of `text`: {main, header, errors, configs}
    POST /diff    {text, backend, a, b}         one backend's source at launch keywords a and b, diffed
    POST /run     {text}                        each backend checked (and timed, tuned on a GPU)
    POST /save    {text}                        write `text` to the file
"""
from __future__ import annotations

import hmac
import html
import json
import os
import secrets
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tle.explore.page import page_shell
from tle.explore.session import Session

MAX_BODY = 4 << 20                         # a kernel file is far smaller; anything larger is not the page's


class Refusal(Exception):
    """A request the server will not serve: the status and the one line that says why."""

    def __init__(self, status: HTTPStatus, why: str):
        super().__init__(why)
        self.status, self.why = status, why


class ExploreServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, session: Session, port: int = 0, token: str | None = None, quiet: bool = True):
        self.session = session
        self.token = token or secrets.token_urlsafe(24)
        self.quiet = quiet
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/?token={self.token}"


class _Handler(BaseHTTPRequestHandler):
    server: ExploreServer
    protocol_version = "HTTP/1.1"

    # -- the routes ---------------------------------------------------------------------------------------
    def do_GET(self):
        self._serve(self._get)

    def do_POST(self):
        self._serve(self._post)

    def _get(self, route: str, query: dict):
        session = self.server.session
        if route == "/":
            stages = query.get("stages", ["1"])[0] != "0"
            return self._send(HTTPStatus.OK, "text/html; charset=utf-8", served_page(session, stages).encode())
        if route == "/source":
            self._check_path(query.get("path", [None])[0])
            with open(session.path) as f:
                return self._json(HTTPStatus.OK, {"path": session.path, "text": f.read()})
        raise Refusal(HTTPStatus.NOT_FOUND, f"no such page: {route} (GET / and /source; POST /lower, /diff, "
                                            f"/run, /save)")

    def _post(self, route: str, query: dict):
        session = self.server.session
        if route not in ("/lower", "/diff", "/run", "/save"):
            raise Refusal(HTTPStatus.NOT_FOUND, f"no such action: {route} (POST /lower, /diff, /run, /save)")
        body = self._body()
        self._check_path(body.get("path"))
        text = _field(body, "text", str)
        if route == "/lower":
            view = session.lower(text, stages=_field(body, "stages", bool, True),
                                 overrides=_field(body, "overrides", str, ""))
            return self._json(HTTPStatus.OK, view.as_dict())
        if route == "/diff":
            try:
                out = session.diff(text, _field(body, "backend", str), _field(body, "a", str, ""),
                                   _field(body, "b", str, ""))
            except ValueError as e:          # an unknown backend, launch keywords that do not read
                raise Refusal(HTTPStatus.BAD_REQUEST, str(e)) from None
            return self._json(HTTPStatus.OK, out)
        if route == "/run":
            return self._json(HTTPStatus.OK, session.run(text))
        return self._json(HTTPStatus.OK, {"saved": session.save(text)})

    # -- checks -------------------------------------------------------------------------------------------
    def _serve(self, handler):
        try:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            self._check_host()
            self._check_token(query)
            handler(url.path, query)
        except Refusal as r:
            self._refuse(r.status, r.why)
        except Exception as e:               # noqa: BLE001 - a bug here answers this request only
            self._refuse(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {type(e).__name__}: {e}")

    def _check_host(self):
        host = (self.headers.get("Host") or "").strip()
        allowed = {f"127.0.0.1:{self.server.server_port}", f"localhost:{self.server.server_port}"}
        if host not in allowed:
            raise Refusal(HTTPStatus.FORBIDDEN, f"refused: Host '{host}' is not this server (127.0.0.1:"
                                                f"{self.server.server_port})")

    def _check_token(self, query: dict):
        given = self.headers.get("X-Tle-Token") or (query.get("token") or [""])[0]
        if not given:
            raise Refusal(HTTPStatus.FORBIDDEN, "refused: no token (open the URL `tle explore` printed, which "
                                                "carries it)")
        if not hmac.compare_digest(given.encode(), self.server.token.encode()):
            raise Refusal(HTTPStatus.FORBIDDEN, "refused: wrong token (open the URL `tle explore` printed)")

    def _check_path(self, path):
        """A request may name the file it is about; it must be this server's file."""
        if path is None:
            return
        session = self.server.session
        if not isinstance(path, str) or (path != session.file_name and os.path.realpath(path)
                                         != os.path.realpath(session.path)):
            raise Refusal(HTTPStatus.FORBIDDEN, f"refused: this server serves only {session.path}, not {path!r}")

    def _body(self) -> dict:
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            raise Refusal(HTTPStatus.LENGTH_REQUIRED, "malformed request: a body with a Content-Length is needed")
        if int(length) > MAX_BODY:
            raise Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"malformed request: body of {length} bytes "
                                                               f"(at most {MAX_BODY})")
        if int(length) == 0:
            raise Refusal(HTTPStatus.BAD_REQUEST, "malformed request: the body is empty (a JSON object is expected)")
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise Refusal(HTTPStatus.BAD_REQUEST, f"malformed request: the body is not JSON ({e})") from None
        if not isinstance(body, dict):
            raise Refusal(HTTPStatus.BAD_REQUEST, "malformed request: the body is not a JSON object")
        return body

    # -- answers ------------------------------------------------------------------------------------------
    def _refuse(self, status: HTTPStatus, why: str):
        if not self.server.quiet:
            where = f"{self.command} {urlsplit(self.path).path}" if getattr(self, "command", None) else "request"
            print(f"tle explore: {where}: {status.value} {why}", file=sys.stderr)
        self._json(status, {"error": why})

    def _json(self, status: HTTPStatus, obj):
        self._send(status, "application/json", json.dumps(obj).encode())

    def _send(self, status: HTTPStatus, kind: str, data: bytes):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # the page's own inline style and script, requests to this server only: no external asset can load
        self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
                                                    "script-src 'unsafe-inline'; connect-src 'self'")
        self.end_headers()
        self.wfile.write(data)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (a request line or headers that do not read) in this server's form."""
        self.close_connection = True
        self._refuse(HTTPStatus(code), f"malformed request: {message or HTTPStatus(code).phrase}")

    def log_message(self, format, *args):    # noqa: A002 - the base class's name
        if not self.server.quiet:
            super().log_message(format, *args)


def _field(body: dict, name: str, kind: type, default=...):
    if name not in body:
        if default is ...:
            raise Refusal(HTTPStatus.BAD_REQUEST, f"malformed request: no '{name}' in the body")
        return default
    value = body[name]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise Refusal(HTTPStatus.BAD_REQUEST, f"malformed request: '{name}' must be a {kind.__name__}, got "
                                              f"{type(value).__name__}")
    return value


# -- the served page ----------------------------------------------------------------------------------------
def served_page(session: Session, stages: bool = True) -> str:
    """The page of the session's current text, with the editor and the tools around it."""
    from tle.lowering.backend import backend_names
    view = session.lower(session.text, stages=stages)
    name = html.escape(session.file_name)
    backends = "".join(f"<option>{html.escape(b)}</option>" for b in backend_names())
    configs = "".join(f'<option value="{html.escape(c)}">' for c in view.configs)
    tools = f"""<div id="tools">
<button id="edit">edit</button> <button id="lower">lower</button>
<label><input type="checkbox" id="stages"{" checked" if stages else ""}> compiler stages</label>
<label>launch keywords <input id="overrides" size="28" placeholder="e.g. BLOCK_SIZE=512, num_warps=8"></label>
<button id="run">run</button> <button id="revert">revert to the file</button>
<button id="save" title="write the edited text to {name}">save to {name}</button> <span id="status"></span></div>
<div id="difftools">diff the <select id="diffbackend">{backends}</select> source between launch keywords
A <input id="diffa" size="24" list="configs" placeholder="(the example launch)"> and
B <input id="diffb" size="24" list="configs" placeholder="e.g. num_warps=8"> <button id="diff">diff</button>
<datalist id="configs">{configs}</datalist></div>
<div id="results"></div>"""
    aside = f'<aside id="editbox" hidden><textarea id="editor" spellcheck="false">{html.escape(session.text)}' \
            f'</textarea></aside>'
    title = f"tle explore: {session.name} ({session.file_name}, {session.size} example)"
    state = "error" if view.errors else "lowered"
    return page_shell(title, view.header, view.main, tools=tools, aside=aside, script=_SERVED_SCRIPT,
                      body_attrs=f' data-state="{state}" data-version="0"', style=_SERVED_STYLE)


_SERVED_STYLE = """
#tools, #difftools { margin: 4px 0; } #status { color: #555; margin-left: 8px; }
#tools label, #tools button { margin-right: 8px; }
#editbox { flex: 0 0 42em; display: flex; padding: 6px 0 6px 6px; } #editbox[hidden] { display: none; }
#editor { flex: 1; font: 12px/1.4 ui-monospace, monospace; white-space: pre; tab-size: 4; }
#results table { border-collapse: collapse; } #results td, #results th { padding: 1px 8px; text-align: left; }
.fail { color: #a00; } .pass { color: #070; }
.d-add { background: #e6ffe6; } .d-del { background: #ffe6e6; } .d-hunk { color: #55a; }
"""

_SERVED_SCRIPT = r"""
const TOKEN = new URLSearchParams(location.search).get('token');
const editor = document.getElementById('editor');
let version = 0;
function esc(s) { const d = document.createElement('div'); d.textContent = s; return d.innerHTML; }
function status(text) { document.getElementById('status').textContent = text; }
async function call(route, body) {
  const r = await fetch(route, {method: 'POST', headers: {'Content-Type': 'application/json', 'X-Tle-Token': TOKEN},
                                body: JSON.stringify(body)});
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
function done(state, text) {          // the tests wait for data-version to change
  document.body.dataset.state = state; document.body.dataset.version = ++version; status(text);
}
async function lower() {
  status('lowering...');
  try {
    const data = await call('/lower', {text: editor.value, stages: document.getElementById('stages').checked,
                                       overrides: document.getElementById('overrides').value});
    document.querySelector('main').innerHTML = data.main;
    document.getElementById('lines').innerHTML = data.header.map(l => '<p>' + esc(l) + '</p>').join('');
    document.getElementById('configs').innerHTML = data.configs.map(c => '<option value="' + esc(c) + '">').join('');
    const first = document.querySelector('section[data-pane="source"] .ln.error');
    if (first) { const body = first.closest('.body'); body.scrollTop = first.offsetTop - body.clientHeight / 3; }
    done(data.errors.length ? 'error' : 'lowered',
         data.errors.length ? data.errors.map(e => (e.line ? 'line ' + e.line + ': ' : '') + e.message).join('; ')
                            : 'lowered');
  } catch (e) { done('refused', String(e)); }
}
async function run() {
  status('running...');
  try {
    const data = await call('/run', {text: editor.value});
    if (data.error) { done('error', data.error.message); return; }
    let rows = '<table><tr><th>backend</th><th>check (' + data.where + ', ' + esc(data.label || '') + ')</th>' +
               '<th>time</th></tr>';
    for (const [b, r] of Object.entries(data.rows)) {
      const cls = r.ok === true ? 'pass' : r.ok === false ? 'fail' : '';
      const verdict = r.ok === true ? 'PASS ' : r.ok === false ? 'FAIL ' : '';
      rows += '<tr class="' + cls + '" data-backend="' + esc(b) + '"><td>' + esc(b) + '</td><td>' + verdict +
              esc(r.detail + (r.extra ? '; ' + r.extra : '')) + '</td><td>' +
              (r.ms != null ? r.ms.toFixed(4) + ' ms' : '-') + '</td></tr>';
      const t = r.autotune;
      if (t && t.error) rows += '<tr><td></td><td colspan="2">autotune: ' + esc(t.error) + '</td></tr>';
      if (t && t.configs) for (const c of t.configs)
        rows += '<tr><td></td><td>' + (c.config === t.chosen ? '&#10003; ' : '') + esc(c.config) + '</td><td>' +
                (c.ms != null ? c.ms.toFixed(4) + ' ms' : esc(c.failed || '-')) + '</td></tr>';
    }
    document.getElementById('results').innerHTML = rows + '</table>';
    done('ran', 'ran on the ' + data.where);
  } catch (e) { done('refused', String(e)); }
}
async function diff() {
  status('diffing...');
  try {
    const data = await call('/diff', {text: editor.value, backend: document.getElementById('diffbackend').value,
                                      a: document.getElementById('diffa').value,
                                      b: document.getElementById('diffb').value});
    const old = document.querySelector('section[data-pane="diff"]');
    if (old) old.remove();
    if (data.error) {
      done('error', (data.error.line ? 'line ' + data.error.line + ': ' : '') + data.error.message); return;
    }
    const rows = data.same ? ['<div class="ln"><code>(the same source)</code></div>'] : data.diff.map(l => {
      const cls = l.startsWith('@@') ? 'd-hunk' : l.startsWith('+') ? 'd-add' : l.startsWith('-') ? 'd-del' : '';
      return '<div class="ln ' + cls + '"><code>' + (esc(l) || ' ') + '</code></div>';
    });
    const section = document.createElement('section');
    section.className = 'pane'; section.dataset.pane = 'diff';
    section.innerHTML = '<h2>diff of the ' + esc(document.getElementById('diffbackend').value) + ' source</h2>' +
                        '<div class="body">' + rows.join('') + '</div>';
    document.querySelector('section[data-pane="source"]').after(section);
    done('diffed', data.same ? 'the same source' : 'diffed');
  } catch (e) { done('refused', String(e)); }
}
async function revert() {
  try {
    const r = await fetch('/source', {headers: {'X-Tle-Token': TOKEN}});
    const data = await r.json();
    if (!r.ok) throw new Error(data.error);
    editor.value = data.text;
    await lower();
  } catch (e) { done('refused', String(e)); }
}
async function save() {
  try { const data = await call('/save', {text: editor.value}); done('saved', 'saved to ' + data.saved); }
  catch (e) { done('refused', String(e)); }
}
document.getElementById('edit').addEventListener('click', () => {
  const box = document.getElementById('editbox'); box.hidden = !box.hidden; if (!box.hidden) editor.focus();
});
document.getElementById('lower').addEventListener('click', lower);
document.getElementById('run').addEventListener('click', run);
document.getElementById('diff').addEventListener('click', diff);
document.getElementById('revert').addEventListener('click', revert);
document.getElementById('save').addEventListener('click', save);
editor.addEventListener('keydown', ev => {           // ctrl/cmd-enter lowers, tab indents
  if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); lower(); }
  if (ev.key === 'Tab') {
    ev.preventDefault(); editor.setRangeText('    ', editor.selectionStart, editor.selectionEnd, 'end');
  }
});
"""
