// An independent client of lossd's standard gRPC surfaces (grpc-js, not lossd's code):
//   node probe.js health SOCKET SERVICE   -> prints the grpc.health.v1 status ("SERVING", ...)
//   node probe.js watch SOCKET SERVICE    -> from before the socket exists: Health/Watch as soon
//                                            as it accepts; prints each status received, one per
//                                            line, and exits once SERVING (10 s at most)
//   node probe.js reflect SOCKET SYMBOL   -> prints JSON: the services reflection lists, and
//                                            the methods of SYMBOL's service as resolved
//   node probe.js details SOCKET METHOD [TIMEOUT_MS]
//                                         -> from before the socket exists: calls METHOD
//                                            ("/lossd.v1.Observer/ListFlows") with an empty request
//                                            as soon as the socket accepts; prints JSON: the status code's name,
//                                            and the grpc-status-details-bin trailer decoded with
//                                            googleapis' own google.rpc.Status and ErrorInfo
//                                            (the google-proto-files package), not lossd's protos
// health.proto is the grpc project's own, as the grpc-health-check package ships it.
"use strict";
const fs = require("fs");
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");
const reflection = require("grpc-reflection-js");
const protobuf = require("protobufjs");

const [cmd, socket, arg] = process.argv.slice(2);
const target = "unix://" + socket;

function health() {
  const proto = path.join(path.dirname(require.resolve("grpc-health-check/package.json")),
                          "proto/health/v1/health.proto");
  const def = grpc.loadPackageDefinition(loader.loadSync(proto, {keepCase: true, enums: String}));
  const client = new def.grpc.health.v1.Health(target, grpc.credentials.createInsecure());
  client.Check({service: arg}, {deadline: Date.now() + 5000}, (err, res) => {
    if (err) {
      console.log(grpc.status[err.code]);
      process.exit(0);
    }
    console.log(res.status);
    process.exit(0);
  });
}

function watch() {
  const proto = path.join(path.dirname(require.resolve("grpc-health-check/package.json")),
                          "proto/health/v1/health.proto");
  const def = grpc.loadPackageDefinition(loader.loadSync(proto, {keepCase: true, enums: String}));
  const give_up = Date.now() + 10000;
  const attempt = () => {
    if (Date.now() > give_up) { console.log("GAVE_UP"); process.exit(1); }
    const client = new def.grpc.health.v1.Health(target, grpc.credentials.createInsecure());
    const call = client.Watch({service: arg});
    let got = false;
    call.on("data", (res) => {
      got = true;
      console.log(res.status);
      if (res.status === "SERVING") process.exit(0);
    });
    call.on("error", () => { client.close(); if (!got) setTimeout(attempt, 2); });
  };
  attempt();
}

async function reflect() {
  const client = new reflection.Client(target, grpc.credentials.createInsecure());
  const services = await client.listServices();
  const root = await client.fileContainingSymbol(arg);
  const svc = root.lookupService(arg);
  const methods = Object.values(svc.methods).map((m) => ({
    name: m.name, request: m.requestType, response: m.responseType,
    server_streaming: !!m.responseStream}));
  console.log(JSON.stringify({services, methods}));
  process.exit(0);
}

function details() {
  const [method, timeout] = [arg, Number(process.argv[5] || 2000)];
  const protos = path.dirname(require.resolve("google-proto-files/package.json"));
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(protos, target);
  root.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"]);
  const Status = root.lookupType("google.rpc.Status");
  const raw = (b) => b;
  const give_up = Date.now() + 10000;
  const attempt = () => {  // from before the socket exists: the call as soon as it accepts
    if (!fs.existsSync(socket)) {
      if (Date.now() > give_up) { console.log("GAVE_UP"); process.exit(1); }
      return setTimeout(attempt, 1);
    }
    const client = new grpc.Client(target, grpc.credentials.createInsecure());
    // Connected first, so that the call's deadline is the call's alone.
    client.waitForReady(Date.now() + 500, (cerr) => {
      if (cerr) {
        client.close();
        return setTimeout(attempt, 1);  // bound, not yet listening
      }
      client.makeUnaryRequest(method, raw, raw, Buffer.alloc(0), new grpc.Metadata(),
                              {deadline: Date.now() + timeout}, (err) => report(err));
    });
  };
  const report = (err) => {
    const out = {code: err ? grpc.status[err.code] : "OK", details: null};
    const bin = err && err.metadata ? err.metadata.get("grpc-status-details-bin") : [];
    if (bin.length) {
      const st = Status.decode(bin[0]);
      out.details = {code: st.code, message: st.message, details: st.details.map((any) => {
        const type = root.lookupType(any.type_url.split("/").pop());
        return Object.assign({"@type": any.type_url},
                             type.toObject(type.decode(any.value), {defaults: true}));
      })};
    }
    console.log(JSON.stringify(out));
    process.exit(0);
  };
  attempt();
}

if (cmd === "health") health();
else if (cmd === "details") details();
else if (cmd === "watch") watch();
else if (cmd === "reflect") reflect().catch((e) => { console.error(String(e)); process.exit(1); });
else { console.error("usage: probe.js health|watch|reflect|details SOCKET ARG"); process.exit(2); }
