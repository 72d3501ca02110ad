// Dumps a Parquet file as tab-separated text (header line, then one line per row), for the
// measured kernel tables of ai-dynamo/aiconfigurator that scenarios/tools/kernel_ratios.py reads.
// Needs Node.js and `npm install hyparquet hyparquet-compressors` in the folder this script runs from
// (Node resolves its imports from the script's own folder: kernel_ratios.py copies it there)
// (PyPI is not reachable from this project's machines; the npm registry is).
// Usage: node parquet_to_tsv.mjs IN.parquet OUT.tsv
import { asyncBufferFromFile, parquetReadObjects } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'
import { writeFileSync } from 'fs'

const [input, output] = process.argv.slice(2)
if (!input || !output) {
  console.error('usage: node parquet_to_tsv.mjs IN.parquet OUT.tsv')
  process.exit(2)
}
const rows = await parquetReadObjects({ file: await asyncBufferFromFile(input), compressors })
const columns = rows.length ? Object.keys(rows[0]) : []
const cell = v => (typeof v === 'bigint' ? v.toString() : String(v))
const lines = [columns.join('\t'), ...rows.map(r => columns.map(c => cell(r[c])).join('\t'))]
writeFileSync(output, lines.join('\n') + '\n')
console.log(`${rows.length} rows: ${columns.join(', ')}`)
