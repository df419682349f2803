// Preloaded into the conformance test's HTTP gateway (node --require): a server that listens on a
// bare port, as supergateway does, is bound to 127.0.0.1 instead of every interface, so the test
// never opens a port to the network.
"use strict";
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" && (args.length === 1 || typeof args[1] === "function")) {
    args.splice(1, 0, "127.0.0.1");
  } else if (args[0] !== null && typeof args[0] === "object" && !("path" in args[0])) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
