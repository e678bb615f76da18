package primary

// MemTableSize is the primary's memtable size, for the benchmark that runs
// bare Pebble with the primary's options.
const MemTableSize = DefaultMemTableSize
