"""The wire between the calling process and its workers: typed messages, slabs, columns, the codec."""
