// An independent client of lossd's standard gRPC surfaces (grpc-js, not lossd's code):
//   node probe.js health SOCKET SERVICE   -> prints the grpc.health.v1 status ("SERVING", ...)
//   node probe.js watch SOCKET SERVICE    -> from before the socket exists: Health/Watch as soon
//                                            as it accepts; prints each status received, one per
//                                            line, and exits once SERVING (10 s at most)
//   node probe.js reflect SOCKET SYMBOL   -> prints JSON: the services reflection lists, and
//                                            the methods of SYMBOL's service as resolved
// health.proto is the grpc project's own, as the grpc-health-check package ships it.
"use strict";
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");
const reflection = require("grpc-reflection-js");

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

if (cmd === "health") health();
else if (cmd === "watch") watch();
else if (cmd === "reflect") reflect().catch((e) => { console.error(String(e)); process.exit(1); });
else { console.error("usage: probe.js health|reflect SOCKET ARG"); process.exit(2); }
