// The official JavaScript client (@kubernetes/client-node) on a custom resource, for
// tests/clients/test_js_informer.py: an informer (makeInformer: list, then watch) and the
// CustomObjectsApi, as an operator written in JavaScript uses them.
//
//   KUBECONFIG=... node informer.mjs GROUP VERSION NAMESPACE PLURAL
//
// Prints one JSON object a line: {"event": "add" | "update" | "delete", "name", "resourceVersion",
// "spec", "status"} for what the informer sees, {"event": "connect"} when it (re)lists or
// (re)watches, {"event": "error", "message"} on an error (and restarts the informer a second later,
// as the client's documentation does), {"event": "started"} once the first list is in the cache.
// Commands on stdin, one a line, each answered with {"event": "done", "command", ...} or
// {"event": "failed", "command", "message"}:
//   create NAME SIZE | patch NAME SIZE (a merge patch) | status NAME PHASE (the status subresource)
//   | delete NAME | list (the informer's cache) | stop (stops the informer and exits 0)
import * as k8s from '@kubernetes/client-node';
import * as readline from 'node:readline';

const [group, version, namespace, plural, kind] = process.argv.slice(2);
const kc = new k8s.KubeConfig();
kc.loadFromDefault();
const api = kc.makeApiClient(k8s.CustomObjectsApi);
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

const print = (fields) => process.stdout.write(`${JSON.stringify(fields)}\n`);
const describe = (obj) => ({
  name: obj.metadata.name,
  namespace: obj.metadata.namespace,
  resourceVersion: obj.metadata.resourceVersion,
  spec: obj.spec,
  status: obj.status,
});

const informer = k8s.makeInformer(
  kc,
  `/apis/${group}/${version}/namespaces/${namespace}/${plural}`,
  () => api.listNamespacedCustomObject({ group, version, namespace, plural }),
);
for (const event of ['add', 'update', 'delete']) {
  informer.on(event, (obj) => print({ event, ...describe(obj) }));
}
informer.on('connect', () => print({ event: 'connect' }));
informer.on('error', (err) => {
  print({ event: 'error', message: String(err?.message ?? err), code: err?.code ?? err?.statusCode ?? null });
  setTimeout(() => informer.start().catch((e) => print({ event: 'error', message: String(e) })), 1000);
});

const commands = {
  async create(name, size) {
    const body = { apiVersion: `${group}/${version}`, kind, metadata: { name }, spec: { size: Number(size) } };
    return describe(await api.createNamespacedCustomObject({ group, version, namespace, plural, body }));
  },
  async patch(name, size) {
    const body = { spec: { size: Number(size) } };
    return describe(await api.patchNamespacedCustomObject({ group, version, namespace, plural, name, body }, merge));
  },
  async status(name, phase) {
    const body = { status: { phase } };
    return describe(
      await api.patchNamespacedCustomObjectStatus({ group, version, namespace, plural, name, body }, merge),
    );
  },
  async delete(name) {
    await api.deleteNamespacedCustomObject({ group, version, namespace, plural, name });
    return { name };
  },
  async list() {
    return { names: informer.list(namespace).map((o) => o.metadata.name).sort() };
  },
  async stop() {
    await informer.stop();
    print({ event: 'done', command: 'stop' });
    process.exit(0);
  },
};

await informer.start();
print({ event: 'started', names: informer.list(namespace).map((o) => o.metadata.name).sort() });

for await (const line of readline.createInterface({ input: process.stdin })) {
  const [command, ...args] = line.trim().split(/\s+/);
  if (!command) continue;
  try {
    if (!(command in commands)) throw new Error(`unknown command ${command}`);
    print({ event: 'done', command, ...(await commands[command](...args)) });
  } catch (err) {
    print({ event: 'failed', command, message: String(err?.body ?? err?.message ?? err), code: err?.code ?? null });
  }
}
