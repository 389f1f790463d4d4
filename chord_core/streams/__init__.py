"""Live streams: RTSP/RTSPS cameras, HLS playlists and capture devices, read with PyAV
(``ingest``), recorded into remuxed segments with retention (``segments``), each segment
analysed as a chunk of jobs in the runtime with standing checks raising alerts through the
library's alert path (``hub``). Credentials in a URL are masked everywhere (``sources``)."""
