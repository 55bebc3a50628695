"""A fake Kubernetes API server for the EndpointSlice discovery tests: lists and watches discovery.k8s.io/v1
EndpointSlices (JSON shapes of the Kubernetes API reference) over HTTP or HTTPS on loopback, checks a bearer token,
and lets a test change slices, expire resource versions (410), drop or end watch streams, and rotate the token."""
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

SLICES_PATH = "/apis/discovery.k8s.io/v1/namespaces/"
WAIT_SLICE_S = 0.05   # how often an open watch looks for news
MAX_WATCH_S = 120     # an open watch never outlives a test


def make_certs(folder, name="server", hosts=("IP:127.0.0.1", "DNS:localhost"), ca=None):
    """Makes a CA (unless `ca` = (cert, key) is given) and a server certificate for `hosts` with the openssl CLI;
    returns (ca_cert, ca_key, server_cert, server_key) paths."""
    folder = Path(folder)
    if ca is None:
        ca = (folder / f"{name}-ca.crt", folder / f"{name}-ca.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", ca[1], "-out", ca[0], "-days", "2", "-subj", f"/CN={name}-ca"],
                       check=True, capture_output=True)
    key, csr, cert, ext = (folder / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    ext.write_text(f"subjectAltName={','.join(hosts)}\n")
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", csr, "-subj", f"/CN={name}"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
                    "-out", cert, "-days", "2", "-extfile", ext], check=True, capture_output=True)
    return ca[0], ca[1], cert, key


def endpoint_slice(name, model, pods, port=8000, port_name="http", namespace="default", address_type="IPv4",
                   labels=None):
    """An EndpointSlice object. `pods`: (pod name, ip, conditions dict or None) triples."""
    endpoints = []
    for pod, ip, conditions in pods:
        endpoint = {"addresses": [ip], "nodeName": "node-1",
                    "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod, "uid": f"uid-{pod}"}}
        if conditions is not None:
            endpoint["conditions"] = conditions
        endpoints.append(endpoint)
    return {
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "0",
                     "labels": {"kubernetes.io/service-name": model, "endpointslice.kubernetes.io/managed-by":
                                "endpointslice-controller.k8s.io", "model.aibrix.ai/name": model, **(labels or {})}},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": port_name, "protocol": "TCP", "port": port}],
    }


READY = {"ready": True, "serving": True, "terminating": False}
TERMINATING = {"ready": False, "serving": True, "terminating": True}
NOT_READY = {"ready": False, "serving": False, "terminating": False}


def status_object(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class FakeKubeApi:
    """Serves slices from one namespace. Every request is recorded in `requests` (path, query, token, status)."""

    def __init__(self, token, cert=None, key=None, namespace="default", port=0):
        self.namespace = namespace
        self.tokens = {token}
        self.cond = threading.Condition()
        self.slices = {}           # name -> object
        self.events = []           # (rv, type, object): the watch history
        self.rv = 100
        self.expired_before = 0    # a watch from an older resourceVersion gets 410
        self.drop_generation = 0   # bumped: open watches are cut without a last chunk
        self.end_generation = 0    # bumped: open watches end normally
        self.list_failures = 0     # lists answered 500 while > 0
        self.requests = []
        self.closing = False
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.tls = cert is not None
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            # The handshake happens in the handler's thread, so a client that refuses the certificate blocks nobody.
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True,
                                                     do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # --- what tests change -------------------------------------------------------------------------------------
    def _record(self, kind, obj):
        self.rv += 1
        if kind != "ERROR":
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, obj))
        self.cond.notify_all()
        return obj

    def put(self, slice_object, silently=False):
        """Adds or replaces a slice (ADDED or MODIFIED on open watches; `silently`: no event, a relist sees it)."""
        with self.cond:
            name = slice_object["metadata"]["name"]
            kind = "MODIFIED" if name in self.slices else "ADDED"
            if silently:
                self.rv += 1
                slice_object = json.loads(json.dumps(slice_object))
                slice_object["metadata"]["resourceVersion"] = str(self.rv)
                self.slices[name] = slice_object
            else:
                self.slices[name] = self._record(kind, slice_object)

    def delete(self, name):
        with self.cond:
            self._record("DELETED", self.slices.pop(name))

    def bookmark(self):
        with self.cond:
            self._record("BOOKMARK", {"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                                      "metadata": {"resourceVersion": ""}})
            return str(self.rv)

    def expire(self):
        """Compacts the history: open watches get an ERROR 410 event, and watches from older versions too."""
        with self.cond:
            self.expired_before = self.rv + 1
            self._record("ERROR", status_object(410, "Expired", f"too old resource version: {self.rv}"))

    def drop_watches(self):
        with self.cond:
            self.drop_generation += 1
            self.cond.notify_all()

    def end_watches(self):
        with self.cond:
            self.end_generation += 1
            self.cond.notify_all()

    def seen(self, predicate):
        with self.cond:
            return [r for r in self.requests if predicate(r)]

    def close(self):
        with self.cond:
            if self.closing:
                return
            self.closing = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # --- the HTTP side -----------------------------------------------------------------------------------------
    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send_json(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                auth = self.headers.get("Authorization", "")
                token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
                record = {"path": url.path, "query": query, "token": token, "watch": query.get("watch") == "1"}
                with api.cond:
                    api.requests.append(record)
                    failing = not record["watch"] and api.list_failures > 0
                    if failing:
                        api.list_failures -= 1
                if url.path != f"{SLICES_PATH}{api.namespace}/endpointslices":
                    record["status"] = 404
                    return self.send_json(404, status_object(404, "NotFound", "the server could not find it"))
                if token not in api.tokens:
                    record["status"] = 401
                    return self.send_json(401, status_object(401, "Unauthorized", "Unauthorized"))
                if failing:
                    record["status"] = 500
                    return self.send_json(500, status_object(500, "InternalError", "etcd is away"))
                record["status"] = 200
                if record["watch"]:
                    return self.watch(int(query.get("resourceVersion") or 0), query)
                with api.cond:
                    items = [s for s in api.slices.values() if self.selected(s, query.get("labelSelector", ""))]
                    listing = {"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                               "metadata": {"resourceVersion": str(api.rv)}, "items": items}
                self.send_json(200, listing)

            @staticmethod
            def selected(obj, selector):
                labels = obj["metadata"].get("labels", {})
                for term in filter(None, selector.split(",")):
                    key, _, value = term.partition("=")
                    if key not in labels or (value and labels[key] != value):
                        return False
                return True

            def chunk(self, obj):
                data = (json.dumps(obj) + "\n").encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def watch(self, since, query):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                selector = query.get("labelSelector", "")
                with api.cond:
                    drop, end = api.drop_generation, api.end_generation
                    if since < api.expired_before:
                        expired = status_object(410, "Expired", f"too old resource version: {since}")
                        return self.finish_watch({"type": "ERROR", "object": expired})
                cursor = since
                deadline = time.monotonic() + MAX_WATCH_S
                while time.monotonic() < deadline:
                    with api.cond:
                        api.cond.wait(WAIT_SLICE_S)
                        news = [e for e in api.events if e[0] > cursor]
                        dropped = api.drop_generation != drop or api.closing
                        ended = api.end_generation != end
                    if dropped:
                        return self.cut()
                    for rv, kind, obj in news:
                        cursor = rv
                        if kind == "ERROR":  # the API server ends a watch after its ERROR event
                            return self.finish_watch({"type": kind, "object": obj})
                        if kind == "BOOKMARK" or self.selected(obj, selector):
                            self.chunk({"type": kind, "object": obj})
                    if ended:
                        return self.finish_watch(None)

            def finish_watch(self, last):
                if last is not None:
                    self.chunk(last)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                self.close_connection = True

            def cut(self):
                """The connection dies mid-stream: no last chunk."""
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass

        return Handler
