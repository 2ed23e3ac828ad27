// Starts kinesalite bound to 127.0.0.1 only.
//
// Why this file exists: the kinesalite CLI listens on every interface and has no host
// option, and this project must never expose a server beyond loopback. Calling the
// library directly lets us pass the host to listen().
//
// Usage: node kinesalite_launcher.js <kinesalite module dir> <port, 0 = any free> [data dir]
// Prints one line "kinesalite listening on http://127.0.0.1:<port>" once it accepts
// connections; LocalKinesisEndpoint waits for that line to learn the port.
'use strict'

const path = require('path')

const [modulePath, portArg, dataDir] = process.argv.slice(2)
if (!modulePath || portArg === undefined) {
  console.error('usage: node kinesalite_launcher.js <kinesalite module dir> <port> [data dir]')
  process.exit(2)
}

// Fix for kinesalite 3.3.3: GetShardIterator AT_TIMESTAMP never answers (the request hangs)
// when no record in the shard arrived at or after the timestamp, because its lazy .head()
// never fires on an empty result. Real Kinesis returns an iterator at the tip instead. The
// replacement takes a LATEST iterator first (which also runs all of kinesalite's validation)
// and then looks for the first record at or after the timestamp; taking LATEST *before*
// the scan means a record arriving during the scan is never skipped. It must be installed
// in the require cache before index.js loads its actions.
const actionPath = require.resolve(path.join(modulePath, 'actions', 'getShardIterator'))
const getShardIterator = require(actionPath)
const db = require(path.join(modulePath, 'db'))
require.cache[actionPath].exports = function getShardIteratorFixed(store, data, cb) {
  if (data.ShardIteratorType !== 'AT_TIMESTAMP' || data.Timestamp == null ||
      data.Timestamp * 1000 > Date.now()) {
    return getShardIterator(store, data, cb)
  }
  const latestRequest = Object.assign({}, data, {ShardIteratorType: 'LATEST', Timestamp: undefined})
  getShardIterator(store, latestRequest, (err, latest) => {
    if (err) return cb(err)
    const shard = db.resolveShardId(data.ShardId)
    const range = {gt: db.shardIxToHex(shard.shardIx), lt: db.shardIxToHex(shard.shardIx + 1)}
    db.lazy(store.getStreamDb(data.StreamName).createReadStream(range), cb)
      .filter((item) => item.value.ApproximateArrivalTimestamp >= data.Timestamp)
      .take(1)
      .join((items) => {
        if (!items.length) return cb(null, latest)
        const sequenceNumber = items[0].key.split('/')[1]
        cb(null, {ShardIterator: db.createShardIterator(data.StreamName, shard.shardId, sequenceNumber)})
      })
  })
}

const server = require(modulePath)({
  path: dataDir || undefined,
  createStreamMs: 0,
  deleteStreamMs: 0,
  updateStreamMs: 0,
  shardLimit: 1000,
})

// Fix for kinesalite 3.3.3: its request handler rethrows a request's 'error', which Node
// emits when the client hangs up before the request is whole (a producer or Spark worker
// killed mid-send). The throw escaped to the event loop and the whole server died, taking
// every other client's streams with it. Real Kinesis drops that one request. This listener
// runs after kinesalite's (both are 'request' listeners, in order) and swaps its rethrow
// for a no-op: the client is gone, so there is no one to answer.
server.on('request', (req) => {
  req.removeAllListeners('error')
  req.on('error', () => {})
})

server.on('error', (err) => {
  console.error('kinesalite failed: ' + (err.stack || err))
  process.exit(1)
})

server.listen(Number(portArg), '127.0.0.1', () => {
  console.log('kinesalite listening on http://127.0.0.1:' + server.address().port)
})
