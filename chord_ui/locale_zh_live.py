"""Simplified Chinese for the Live page (streams, their states, chunks and alerts). Merged
into ``chord_ui.i18n.ZH``; the same rules as the other locale files (placeholders kept,
checked by ``tests/app/test_i18n.py``)."""

from __future__ import annotations

ZH_LIVE: dict[str, str] = {
    "Live": "直播",
    "Each stream is recorded into segments (kept by age and size) and analysed chunk "
    "by chunk; an alert plays from its moment. Stopping a stream keeps its results.":
        "每路视频流都被录制为分段文件（按时长和大小保留），并逐段分析；告警可从其时刻开始播放。"
        "停止视频流会保留其结果。",
    "Stream address": "视频流地址",
    "`rtsp://`, `rtsps://`, `http(s)://….m3u8` or `/dev/videoN`; the password is never "
    "shown or stored": "`rtsp://`、`rtsps://`、`http(s)://….m3u8` 或 `/dev/videoN`；"
                       "密码不会被显示或保存",
    "Chunk length (s)": "分段长度（秒）",
    "Alert threshold": "告警阈值",
    "Target to ground (optional)": "要定位的目标（可选）",
    "Standing checks, one per line (optional)": "常驻检查，每行一条（可选）",
    "a person climbs the fence": "有人翻越围栏",
    "Start": "开始",
    "Describe each chunk": "描述每个分段",
    "Started {url}": "已开始 {url}",
    "No stream yet: start one above.": "还没有视频流：请在上方添加一路。",
    "Stop": "停止",
    "Last error: {e}": "最近的错误：{e}",
    "{p} packets · {r} reconnects · {j} clock jumps": "{p} 个数据包 · 重连 {r} 次 · 时钟跳变 {j} 次",
    "🔔 **{s}** at {t0} s (P={p})": "🔔 **{s}** 于 {t0} 秒（P={p}）",
    "connecting": "连接中", "live": "直播中", "stalled": "无画面", "reconnecting": "重连中",
    "stopped": "已停止", "failed": "失败", "recorded": "已录制", "analysing": "分析中",
    "done": "完成", "cancelled": "已取消",
}
