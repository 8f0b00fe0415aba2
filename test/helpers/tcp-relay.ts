import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/**
 * A TCP relay in front of the server that a test can stop (connections refused, open ones cut) and
 * start again on the same port, or turn into a black hole (bytes silently dropped both ways).
 */
export class Relay {
  #server: Server | undefined;
  #sockets = new Set<Socket>();
  blackhole = false;
  /** Once a client sends these bytes, that connection gets no more answers (once). */
  muteAfter: Buffer | undefined;
  port = 0;
  constructor(readonly target: { host: string; port: number }) {}

  async start(): Promise<void> {
    const srv = createServer((inbound) => {
      const outbound = connect(this.target.port, this.target.host);
      const pair = [inbound, outbound];
      for (const s of pair) this.#sockets.add(s);
      const drop = () => {
        for (const s of pair) {
          s.destroy();
          this.#sockets.delete(s);
        }
      };
      let mute = false;
      inbound.on('data', (d: Buffer) => {
        if (this.blackhole) return;
        // The statement passes; its answer and everything after it are dropped.
        if (this.muteAfter && d.includes(this.muteAfter)) {
          mute = true;
          this.muteAfter = undefined;
        }
        outbound.write(d);
      });
      outbound.on('data', (d) => void (this.blackhole || mute || inbound.write(d)));
      for (const s of pair) {
        s.on('error', drop);
        s.on('close', drop);
      }
    });
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      srv.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (srv.address() as AddressInfo).port;
    this.#server = srv;
  }

  async stop(): Promise<void> {
    const srv = this.#server;
    this.#server = undefined;
    for (const s of this.#sockets) s.destroy();
    this.#sockets.clear();
    if (srv) await new Promise<void>((r) => srv.close(() => r()));
  }
}
